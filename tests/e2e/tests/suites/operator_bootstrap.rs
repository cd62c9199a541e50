//! From `kubectl apply` to a healthy cluster: 3x1 and 3x2 clusters become Ready,
//! pass `redis-cli --cluster check`, take 10,000 keys from the Python cluster
//! client and give every one back; pods carry the contract labels; with zone and
//! node Required 1, every shard has one member in every zone; the client
//! Service's ClusterIP answers from the host.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use e2e::cluster::{Env, MemberPod, condition, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::Suite;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

fn assert_healthy(env: &Env, ns: &str, name: &str, shards: u32, replicas: u32) -> Vec<MemberPod> {
    let members = env.members(ns, name).unwrap();
    assert_eq!(
        members.len() as u32,
        shards * (replicas + 1),
        "members: {members:#?}"
    );
    for m in &members {
        assert!(m.ready, "member pod {} not Ready: {m:?}", m.name);
        assert!(!m.ip.is_empty(), "member pod {} has no IP", m.name);
        assert_eq!(
            m.name,
            format!("{name}-{}-{}-0", m.shard, m.member),
            "pod name"
        );
    }
    let primaries: Vec<_> = members.iter().filter(|m| m.role == "primary").collect();
    assert_eq!(
        primaries.len() as u32,
        shards,
        "one primary per shard by label: {members:#?}"
    );
    let replicas_n = members.iter().filter(|m| m.role == "replica").count() as u32;
    assert_eq!(
        replicas_n,
        shards * replicas,
        "replica labels: {members:#?}"
    );
    let password = env.password(ns, name).unwrap();
    for m in &members {
        env.cluster_check(&m.ip, &password).unwrap();
    }
    members
}

fn fill_and_read(env: &Env, members: &[MemberPod], password: &str) {
    let hosts: Vec<&str> = members.iter().map(|m| m.ip.as_str()).collect();
    let out = env
        .judge(&hosts, password, &["fill", "--count", "10000"])
        .unwrap();
    assert_eq!(out["written"], 10000, "{out}");
    assert_eq!(out["missing_or_wrong"], 0, "{out}");
}

/// The cluster's client Service (named after it) routes, through the
/// testbed's Service proxy: a client on the host reaches a member at its
/// ClusterIP.
fn client_service_answers(env: &Env, ns: &str, name: &str, password: &str) {
    let svc = env
        .kubectl_json(&["get", "service", "-n", ns, name])
        .unwrap();
    let vip = svc["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut last = String::new();
    let res = wait_until(Duration::from_secs(30), Duration::from_millis(250), || {
        let mut cmd = Command::new("timeout");
        cmd.args([
            "3",
            "redis-cli",
            "--no-auth-warning",
            "-h",
            &vip,
            "-p",
            "6379",
        ]);
        if !password.is_empty() {
            cmd.args(["-a", password]);
        }
        let out = cmd.arg("ping").output()?;
        last = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(last == "PONG")
    });
    assert!(
        res.is_ok(),
        "client Service {ns}/{name} at {vip}:6379 from the host: {last:?}"
    );
}

#[test]
fn a_3x1_and_a_3x2_cluster_go_from_apply_to_ready_and_keep_every_key() {
    let Some(suite) = Suite::start("operator_bootstrap", "bootstrap", "e2e-bootstrap") else {
        return;
    };
    let (env, ns) = (&suite.env, &suite.ns);

    let one = cluster_manifest("one", 3, 1);
    let two = cluster_manifest("two", 3, 2)
        .spread("zone", 1, "Required")
        .spread("node", 1, "Required");
    env.apply(&ns.name, &one.yaml()).unwrap();
    env.apply(&ns.name, &two.yaml()).unwrap();

    for (name, replicas) in [("one", 1), ("two", 2)] {
        let obj = env
            .wait_condition(&ns.name, name, "Ready", "True", Duration::from_secs(240))
            .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", suite.operator.tail(60)));
        assert_eq!(obj["status"]["readyShards"], 3, "{}", obj["status"]);
        let members = assert_healthy(env, &ns.name, name, 3, replicas);
        let password = env.password(&ns.name, name).unwrap();
        // The short node timeout of the bootstrap is gone once it is Ready.
        for m in &members {
            let got = env
                .valkey_cli(&m.ip, &password, &["config", "get", "cluster-node-timeout"])
                .unwrap();
            assert!(
                got.lines().any(|l| l.trim() == "5000"),
                "{}: cluster-node-timeout {got:?} once Ready, want 5000",
                m.name
            );
        }
        fill_and_read(env, &members, &password);
        client_service_answers(env, &ns.name, name, &password);
    }

    // Required zone 1 + node 1: one member of every shard in every zone, on
    // distinct nodes, as the real kube-scheduler bound them.
    let zones = env.node_zones().unwrap();
    let members = env.members(&ns.name, "two").unwrap();
    for shard in 0..3 {
        let of_shard: Vec<_> = members.iter().filter(|m| m.shard == shard).collect();
        let in_zones: BTreeSet<_> = of_shard.iter().map(|m| zones[&m.node].clone()).collect();
        let on_nodes: BTreeSet<_> = of_shard.iter().map(|m| m.node.clone()).collect();
        assert_eq!(in_zones.len(), 3, "shard {shard} zones: {of_shard:#?}");
        assert_eq!(on_nodes.len(), 3, "shard {shard} nodes: {of_shard:#?}");
    }
    let obj = env.cluster(&ns.name, "two").unwrap();
    let spread = condition(&obj, "TopologySpread").expect("TopologySpread condition");
    assert_eq!(spread["status"], "True", "{spread}");
}
