// Over 600 lines: tests, one scenario per function, read top to bottom.
//! External access (issue 27): clients outside Kubernetes reach every
//! member of a cluster with `spec.externalAccess`, from `testbed outside`
//! (node and load-balancer addresses only; a pod address reachable from
//! there fails the suite). One TLS cluster of 3 shards x 1 replica:
//!
//! - NodePort: every member announces `nodeIP:nodePort` (status
//!   `externalAddress`, the Service's nodePort on its pod's node); the
//!   Python cluster client and valkey-glide, each seeded with one such
//!   address, write and read keys of every shard, verifying the
//!   certificate against the address, and learn only external addresses;
//! - a primary's pod deleted with its node cordoned: a failover, and the
//!   member comes back on another node; its announced address follows
//!   (status and an `ExternalAddressChanged` event) while an outside
//!   writer of each client keeps writing, and every acknowledged key reads
//!   back;
//! - scaled out to 4 shards under both writers (slots migrate to the new
//!   shard, clients follow MOVED and ASK to its announced addresses), both
//!   clients reach all 4 shards;
//! - switched live to LoadBalancer: every member announces its balancer's
//!   address; the client works again with TLS verification of that
//!   address; scaled in to 3 shards under both writers (slots migrate
//!   away, the removed members' Services go); a rolling restart of every
//!   member (a pod template change) under both writers; `testbed lb
//!   reassign` of one member's balancer is followed;
//! - turned off: the member Services are deleted and every member's
//!   `cluster-announce-client-*` are reset (empty, 0), status empty.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, Load, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load, wait_load_running};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NAME: &str = "edge";

/// Uncordons the node on drop (the testbed may be shared).
struct Uncordon<'a>(&'a Env, String);

impl Drop for Uncordon<'_> {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&["uncordon", &self.1]);
    }
}

/// `(shard, member) -> externalAddress` from the status.
fn announced(env: &Env, ns: &str) -> Result<BTreeMap<(u64, u64), String>> {
    let c = env.cluster(ns, NAME)?;
    Ok(c["status"]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                (
                    m["shard"].as_u64().unwrap_or(99),
                    m["member"].as_u64().unwrap_or(99),
                ),
                m["externalAddress"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect())
}

/// The clients a suite runs outside: `judge.py --client NAME`.
const CLIENTS: [&str; 2] = ["valkey", "glide"];

/// Waits until every member of `shards` shards (2 members each) announces
/// an address that `expected` accepts; returns them.
fn wait_announced(
    env: &Env,
    ns: &str,
    shards: usize,
    what: &str,
    expected: impl Fn((u64, u64), &str) -> Result<bool>,
) -> Result<BTreeMap<(u64, u64), String>> {
    let mut last = BTreeMap::new();
    wait_until(Duration::from_secs(120), Duration::from_millis(500), || {
        last = announced(env, ns)?;
        if last.len() != 2 * shards {
            return Ok(false);
        }
        for (k, a) in &last {
            if a.is_empty() || !expected(*k, a)? {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .with_context(|| format!("{what}: status externalAddress {last:?}"))?;
    Ok(last)
}

/// What member (s, m)'s Service and pod say its NodePort address is.
fn node_port_address(env: &Env, ns: &str, (s, m): (u64, u64)) -> Result<String> {
    let svc = env.kubectl_json(&[
        "get",
        "service",
        &format!("{NAME}-{s}-{m}-external"),
        "-n",
        ns,
    ])?;
    let port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap_or(0);
    let pod_name = svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Between a pod's deletion and its replacement's scheduling there is no
    // address yet: empty, which no announced address equals.
    let pod = match env.kubectl_json(&["get", "pod", &pod_name, "-n", ns]) {
        Ok(pod) => pod,
        Err(e) if format!("{e:#}").contains("NotFound") => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let Some(node) = pod["spec"]["nodeName"].as_str() else {
        return Ok(String::new());
    };
    let n = env.kubectl_json(&["get", "node", node])?;
    let ip = n["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap_or_default();
    Ok(format!("{ip}:{port}"))
}

/// The first `status.loadBalancer.ingress[].ip` of member (s, m)'s Service.
fn balancer_address(env: &Env, ns: &str, (s, m): (u64, u64)) -> Result<String> {
    let svc = env.kubectl_json(&[
        "get",
        "service",
        &format!("{NAME}-{s}-{m}-external"),
        "-n",
        ns,
    ])?;
    Ok(svc["status"]["loadBalancer"]["ingress"][0]["ip"]
        .as_str()
        .map(|ip| format!("{ip}:6379"))
        .unwrap_or_default())
}

/// `judge.py --client CLIENT fill` from outside seeded with `seed` only:
/// retried (the members pick a reissued certificate up within a minute,
/// and a change of the announced addresses reaches every member's view of
/// the others by gossip, so a client that connects right after it may
/// learn a topology that is a moment behind), until keys of every shard
/// are written and read back and the client learnt exactly the `external`
/// addresses.
fn fill_from_outside(
    env: &Env,
    client: &str,
    seed: &str,
    password: &str,
    prefix: &str,
    external: &BTreeSet<String>,
) -> Result<Value> {
    let shards = external.len() / 2;
    let prefix = format!("{prefix}-{client}");
    let mut last = String::new();
    let mut result = Value::Null;
    wait_until(
        Duration::from_secs(120),
        Duration::from_secs(1),
        || match env.judge(
            &[seed],
            password,
            &[
                "--client", client, "fill", "--count", "300", "--prefix", &prefix,
            ],
        ) {
            Ok(v) => {
                let nodes: BTreeSet<String> = v["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect();
                if &nodes != external {
                    last = format!(
                        "the client learnt {nodes:?}, want the external addresses {external:?}"
                    );
                    return Ok(false);
                }
                result = v;
                Ok(true)
            }
            Err(e) => {
                last = format!("{e:#}");
                Ok(false)
            }
        },
    )
    .with_context(|| format!("{client}: fill from outside via {seed}: {last}"))?;
    ensure!(
        result["missing_or_wrong"] == 0 && result["primaries"] == shards,
        "{client}: fill via {seed}: {result}"
    );
    if !last.is_empty() {
        eprintln!("external_access: {client} via {seed}: retried after: {last}");
    }
    Ok(result)
}

/// Both clients fill from outside, seeded with `seed`.
fn fill_both(
    env: &Env,
    seed: &str,
    password: &str,
    prefix: &str,
    external: &BTreeSet<String>,
) -> Result<String> {
    let mut said = Vec::new();
    for client in CLIENTS {
        let r = fill_from_outside(env, client, seed, password, prefix, external)?;
        said.push(format!("{client} {r}"));
    }
    Ok(said.join("; "))
}

/// One outside writer per client, seeded with `seed`, running.
fn start_writers(
    env: &Env,
    seed: &str,
    password: &str,
    work: &Path,
    name: &str,
) -> Result<Vec<Load>> {
    let mut loads = Vec::new();
    for client in CLIENTS {
        let mut load = env.start_load(
            &[seed],
            password,
            work,
            &format!("{name}-{client}"),
            &["--client", client],
        )?;
        wait_load_running(&mut load).with_context(|| format!("{client} writer"))?;
        loads.push(load);
    }
    Ok(loads)
}

/// Stops the writers; every key they had acknowledged reads back through
/// `hosts`. Returns their summaries.
fn finish_writers(
    env: &Env,
    loads: &mut [Load],
    password: &str,
    hosts: &[String],
    what: &str,
) -> Result<String> {
    let mut said = Vec::new();
    for (client, load) in CLIENTS.iter().zip(loads.iter_mut()) {
        let summary = finish_load(load, &format!("{client} writer {what}"))?;
        let checked = env
            .verify_keys(hosts, password, &load.keys)
            .with_context(|| format!("{client} writer {what}"))?;
        said.push(format!("{client} {summary} {checked}"));
    }
    Ok(said.join("; "))
}

/// The uids of the cluster's member pods.
fn member_uids(env: &Env, ns: &str) -> Result<BTreeSet<String>> {
    Ok(env
        .kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("valkey.rs/cluster={NAME}"),
            "-o",
            "jsonpath={.items[*].metadata.uid}",
        ])?
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// Fails when the outside namespace reaches a member's pod address.
fn pod_ips_unreachable_from_outside(env: &Env, ips: &[String]) -> Result<()> {
    let script: String = ips
        .iter()
        .map(|ip| {
            format!(
                "timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/6379' 2>/dev/null && echo REACHED {ip}\n"
            )
        })
        .collect();
    let out = Command::new(&env.testbed_bin)
        .arg("--dir")
        .arg(&env.testbed_dir)
        .args(["outside", "--", "bash", "-c", &script])
        .env_remove("TESTBED_DIR")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        !text.contains("REACHED"),
        "the outside namespace reaches pod addresses: {text}"
    );
    Ok(())
}

/// The member's own `cluster-announce-client-*` (asked on its pod IP).
fn announce_settings(env: &Env, ip: &str, password: &str) -> Result<Vec<String>> {
    let text = env.valkey_cli(
        ip,
        password,
        &["config", "get", "cluster-announce-client-*"],
    )?;
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut pairs: Vec<String> = lines
        .chunks(2)
        .map(|kv| format!("{}={}", kv[0], kv.get(1).unwrap_or(&"")))
        .collect();
    pairs.sort();
    Ok(pairs)
}

fn write_ca(env: &Env, ns: &str, dir: &Path) -> Result<std::path::PathBuf> {
    let pem = env.secret_text(ns, &format!("{NAME}-tls-ca"), "ca.crt")?;
    let path = dir.join("ca.crt");
    std::fs::write(&path, pem)?;
    Ok(path)
}

#[test]
fn outside_clients_follow_every_member_through_node_ports_and_load_balancers() {
    let Some(suite) = Suite::start("external_access", "external", "e2e-external") else {
        return;
    };
    suite.run(&[NAME], |env, ns| {
        let result = scenario(env, ns);
        env.judge_outside(false);
        env.use_tls(None);
        result
    });
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn scenario(env: &Env, ns: &str) -> Result<()> {
    let start = Instant::now();
    let work = env.work_dir("external_access")?;
    let m = cluster_manifest(NAME, 3, 1).extra_spec("  tls:\n    enabled: true\n");
    env.apply(ns, &m.yaml())?;
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        Ok(env
            .secret_text(ns, &format!("{NAME}-tls-ca"), "ca.crt")
            .is_ok())
    })?;
    env.use_tls(Some(write_ca(env, ns, &work)?));
    env.wait_ready_shape(ns, &m, Duration::from_secs(180))?;
    let password = env.password(ns, NAME)?;
    // Turned on for a live cluster (the shape check above reads CLUSTER
    // NODES by pod IP, which members with external access no longer show).
    env.patch_cluster(
        ns,
        NAME,
        r#"{"spec":{"externalAccess":{"type":"NodePort","annotations":{"example.com/edge":"yes"}}}}"#,
    )?;
    eprintln!(
        "external_access: {NAME} Ready with TLS after {:?}, NodePort access turned on",
        start.elapsed()
    );

    // Services: one per member, owned, annotated, selecting its pod.
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(env
            .kubectl(&["get", "services", "-n", ns, "-o", "name"])?
            .matches("-external")
            .count()
            == 6)
    })?;
    let services = env.kubectl_json(&[
        "get",
        "services",
        "-n",
        ns,
        "-l",
        &format!("valkey.rs/cluster={NAME}"),
    ])?;
    let external: Vec<&Value> = services["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .ends_with("-external")
        })
        .collect();
    ensure!(
        external.len() == 6,
        "want 6 member Services, have {}",
        external.len()
    );
    for s in &external {
        ensure!(s["spec"]["type"] == "NodePort", "{s}");
        ensure!(
            s["metadata"]["annotations"]["example.com/edge"] == "yes",
            "{s}"
        );
        ensure!(
            s["metadata"]["ownerReferences"][0]["kind"] == "ValkeyCluster",
            "{s}"
        );
    }

    let node_ports = wait_announced(env, ns, 3, "NodePort", |k, a| {
        Ok(node_port_address(env, ns, k)? == a)
    })?;
    let set: BTreeSet<String> = node_ports.values().cloned().collect();
    pod_ips_unreachable_from_outside(env, &env.member_ips(ns, NAME)?)?;

    env.judge_outside(true);
    let seed = node_ports[&(1, 0)].clone();
    let fill = fill_both(env, &seed, &password, "np", &set)?;
    eprintln!(
        "external_access: NodePort: seeded with {seed} only, both clients reached every shard with TLS verification of the address ({fill}) after {:?}",
        start.elapsed()
    );

    // A primary's pod deleted with its node cordoned: failover, and the
    // member comes back on another node, announcing that node.
    let victim = env.member_with_role(ns, NAME, 0, "primary")?;
    let key = (0u64, u64::from(victim.member));
    let old_address = node_ports[&key].clone();
    let mut loads = start_writers(env, &seed, &password, &work, "moved")?;
    env.kubectl(&["cordon", &victim.node])?;
    let _uncordon = Uncordon(env, victim.node.clone());
    env.kubectl(&["delete", "pod", &victim.name, "-n", ns, "--wait=false"])?;
    let moved = wait_announced(env, ns, 3, "member moved", |k, a| {
        Ok(node_port_address(env, ns, k)? == a && (k != key || a != old_address))
    })?;
    env.wait_condition(ns, NAME, "Ready", "True", Duration::from_secs(120))?;
    let set: BTreeSet<String> = moved.values().cloned().collect();
    let hosts: Vec<String> = set.iter().cloned().collect();
    let summary = finish_writers(env, &mut loads, &password, &hosts, "across the move")?;
    let events = env.object_events(ns, "ValkeyCluster", NAME)?;
    // One event naming both addresses, or (when a status was written while
    // the pod was away) one saying the old address is gone and a later one
    // naming the new address.
    let member = format!("member {}/{} ", key.0, key.1);
    let changed: Vec<&str> = events
        .iter()
        .filter(|e| e.reason == "ExternalAddressChanged" && e.message.starts_with(&member))
        .map(|e| e.message.as_str())
        .collect();
    let old_gone = changed.iter().position(|m| m.contains(&old_address));
    let new_seen = changed.iter().rposition(|m| m.contains(&moved[&key]));
    ensure!(
        matches!((old_gone, new_seen), (Some(o), Some(n)) if o <= n),
        "no ExternalAddressChanged events for {key:?} {old_address} -> {}: {changed:?}",
        moved[&key]
    );
    eprintln!(
        "external_access: member {key:?} moved off {} ({old_address} -> {}), the outside writers followed ({summary}); every acknowledged key read back, after {:?}",
        victim.node,
        moved[&key],
        start.elapsed()
    );
    drop(_uncordon);

    // Scaled out under both writers: slots migrate to a fourth shard, whose
    // members announce their node ports before clients are sent to them.
    let seed = moved[&(1, 0)].clone();
    let mut loads = start_writers(env, &seed, &password, &work, "out")?;
    env.patch_cluster(ns, NAME, r#"{"spec":{"shards":4}}"#)?;
    env.wait_condition(ns, NAME, "Ready", "True", Duration::from_secs(300))?;
    let scaled = wait_announced(env, ns, 4, "scaled out", |k, a| {
        Ok(node_port_address(env, ns, k)? == a)
    })?;
    let set: BTreeSet<String> = scaled.values().cloned().collect();
    let hosts: Vec<String> = set.iter().cloned().collect();
    let summary = finish_writers(env, &mut loads, &password, &hosts, "across the scale-out")?;
    let fill = fill_both(env, &seed, &password, "np4", &set)?;
    eprintln!(
        "external_access: scaled out to 4 shards under outside writers ({summary}); both clients reach all 4 shards ({fill}), after {:?}",
        start.elapsed()
    );

    // Switched live to LoadBalancer.
    env.patch_cluster(
        ns,
        NAME,
        r#"{"spec":{"externalAccess":{"type":"LoadBalancer"}}}"#,
    )?;
    let balanced = wait_announced(env, ns, 4, "LoadBalancer", |k, a| {
        Ok(balancer_address(env, ns, k)? == a)
    })?;
    let set: BTreeSet<String> = balanced.values().cloned().collect();
    let seed = balanced[&(2, 1)].clone();
    fill_both(env, &seed, &password, "lb", &set)?;
    eprintln!(
        "external_access: LoadBalancer: every member announces its balancer, both clients seeded with {seed} reached every shard with TLS verification, after {:?}",
        start.elapsed()
    );

    // Scaled in under both writers: the fourth shard's slots migrate away
    // and its Services go.
    let mut loads = start_writers(env, &seed, &password, &work, "in")?;
    env.patch_cluster(ns, NAME, r#"{"spec":{"shards":3}}"#)?;
    env.wait_condition(ns, NAME, "Ready", "True", Duration::from_secs(300))?;
    let balanced = wait_announced(env, ns, 3, "scaled in", |k, a| {
        Ok(balancer_address(env, ns, k)? == a)
    })?;
    let set: BTreeSet<String> = balanced.values().cloned().collect();
    let hosts: Vec<String> = set.iter().cloned().collect();
    let summary = finish_writers(env, &mut loads, &password, &hosts, "across the scale-in")?;
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        Ok(env
            .kubectl(&["get", "services", "-n", ns, "-o", "name"])?
            .matches("-external")
            .count()
            == 6)
    })
    .context("the removed shard's member Services are still there")?;
    fill_both(env, &seed, &password, "lb3", &set)?;
    eprintln!(
        "external_access: scaled in to 3 shards under outside writers ({summary}); the removed members' Services are gone, after {:?}",
        start.elapsed()
    );

    // A rolling restart of every member under both writers.
    let before: BTreeSet<String> = member_uids(env, ns)?;
    let mut loads = start_writers(env, &seed, &password, &work, "roll")?;
    env.patch_cluster(
        ns,
        NAME,
        r#"{"spec":{"podTemplate":{"metadata":{"annotations":{"example.com/rolled":"1"}}}}}"#,
    )?;
    env.wait_condition(ns, NAME, "Progressing", "False", Duration::from_secs(420))?;
    env.wait_condition(ns, NAME, "Ready", "True", Duration::from_secs(60))?;
    let after: BTreeSet<String> = member_uids(env, ns)?;
    ensure!(
        after.len() == 6 && after.is_disjoint(&before),
        "not every member was restarted: before {before:?}, after {after:?}"
    );
    let summary = finish_writers(
        env,
        &mut loads,
        &password,
        &hosts,
        "across the rolling restart",
    )?;
    eprintln!(
        "external_access: every member restarted under outside writers ({summary}), after {:?}",
        start.elapsed()
    );

    // A balancer's address reassigned: the announcement follows.
    let moved_key = (1u64, 1u64);
    env.testbed(&["lb", "reassign", "-n", ns, &format!("{NAME}-1-1-external")])?;
    let reassigned = wait_announced(env, ns, 3, "reassigned", |k, a| {
        Ok(balancer_address(env, ns, k)? == a && (k != moved_key || a != balanced[&moved_key]))
    })?;
    let set: BTreeSet<String> = reassigned.values().cloned().collect();
    fill_both(env, &reassigned[&moved_key], &password, "lb2", &set)?;
    eprintln!(
        "external_access: reassigned {} -> {}, followed, after {:?}",
        balanced[&moved_key],
        reassigned[&moved_key],
        start.elapsed()
    );

    // Off: Services gone, announcements reset.
    env.judge_outside(false);
    env.patch_cluster(ns, NAME, r#"{"spec":{"externalAccess":null}}"#)?;
    let ips = env.member_ips(ns, NAME)?;
    let mut last = String::new();
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        let services = env.kubectl(&["get", "services", "-n", ns, "-o", "name"])?;
        if services.contains("-external") {
            last = services;
            return Ok(false);
        }
        for ip in &ips {
            let settings = announce_settings(env, ip, &password)?;
            let reset = settings
                .iter()
                .all(|kv| kv.ends_with('=') || kv.ends_with("=0"));
            if !reset {
                last = format!("{ip}: {settings:?}");
                return Ok(false);
            }
        }
        Ok(announced(env, ns)?.values().all(String::is_empty))
    })
    .with_context(|| format!("external access off: {last}"))?;
    // And clients inside get pod addresses again.
    let slots = env.valkey_cli(&ips[0], &password, &["cluster", "slots"])?;
    if !ips.iter().any(|ip| slots.contains(ip.as_str())) {
        bail!("CLUSTER SLOTS names no pod address once off: {slots}");
    }
    eprintln!(
        "external_access: off: member Services deleted, announcements reset; {:.1}s in all",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
