//! Placement as the real kube-scheduler carries it out (issue 2):
//! - with one zone cordoned, zone Required 1 leaves exactly the members that need
//!   the third zone Pending and explains why in status;
//! - zone Preferred 1 places every member anyway and reports the violation;
//! - when the zone is uncordoned, the Pending members are scheduled into it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use e2e::cluster::{Env, MemberPod, condition, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::Suite;
use std::collections::BTreeSet;
use std::time::Duration;

const ZONE: &str = "topology.kubernetes.io/zone";

/// 3 shards x 3 members, zone 1 in `zone_mode`, node Required 1.
fn manifest(name: &str, zone_mode: &str) -> String {
    cluster_manifest(name, 3, 2)
        .spread("zone", 1, zone_mode)
        .spread("node", 1, "Required")
        .yaml()
}

/// Cordons the nodes of a zone for the life of the guard.
struct Cordon<'a> {
    env: &'a Env,
    nodes: Vec<String>,
}

impl<'a> Cordon<'a> {
    fn zone(env: &'a Env, zone: &str) -> Self {
        let nodes: Vec<String> = env
            .node_zones()
            .unwrap()
            .into_iter()
            .filter(|(_, z)| z == zone)
            .map(|(n, _)| n)
            .collect();
        assert!(!nodes.is_empty(), "no nodes in {zone}");
        for n in &nodes {
            env.kubectl(&["cordon", n]).unwrap();
        }
        Cordon { env, nodes }
    }

    fn lift(&mut self) {
        for n in self.nodes.drain(..) {
            let _ = self.env.kubectl(&["uncordon", &n]);
        }
    }
}

impl Drop for Cordon<'_> {
    fn drop(&mut self) {
        self.lift();
    }
}

fn scheduled(members: &[MemberPod]) -> Vec<&MemberPod> {
    members.iter().filter(|m| !m.node.is_empty()).collect()
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_cordoned_zone_leaves_required_members_pending_with_a_reason_and_preferred_reports_a_violation()
{
    let Some(suite) = Suite::start("placement_spread", "placement", "e2e-placement") else {
        return;
    };
    let (env, ns, operator) = (&suite.env, &suite.ns, &suite.operator);
    let zones = env.node_zones().unwrap();
    assert!(
        zones.values().all(|z| !z.is_empty()),
        "every node has a zone: {zones:?}"
    );
    let all_zones: BTreeSet<String> = zones.values().cloned().collect();
    assert_eq!(all_zones.len(), 3, "the suite needs a 3-zone testbed");
    let cordoned = all_zones.iter().last().unwrap().clone();
    let mut cordon = Cordon::zone(env, &cordoned);

    env.apply(&ns.name, &manifest("req", "Required")).unwrap();
    env.apply(&ns.name, &manifest("pref", "Preferred")).unwrap();

    // Required: one member of every shard cannot go anywhere; it stays Pending
    // and status says which key and how many domains there are.
    let mut last = serde_json::Value::Null;
    let explained = wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        let obj = env.cluster(&ns.name, "req")?;
        let ok = condition(&obj, "TopologySpread").is_some_and(|c| {
            c["status"] == "False"
                && c["reason"] == "RequiredConstraintUnsatisfiable"
                && c["message"].as_str().unwrap_or("").contains(ZONE)
        });
        last = obj;
        Ok(ok)
    });
    assert!(
        explained.is_ok(),
        "req: no TopologySpread explanation; status: {}\noperator log:\n{}",
        last["status"],
        operator.tail(40)
    );
    let msg = condition(&last, "TopologySpread").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    println!("Required, zone cordoned: {msg}");
    assert!(
        msg.contains("only 2"),
        "the reason names the 2 eligible zones: {msg}"
    );

    wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        let m = env.members(&ns.name, "req")?;
        Ok(m.len() == 9 && scheduled(&m).iter().filter(|p| p.ready).count() == 6)
    })
    .unwrap_or_else(|_| {
        panic!(
            "req: expected 6 running members and 3 Pending: {:#?}",
            env.members(&ns.name, "req")
        )
    });
    let members = env.members(&ns.name, "req").unwrap();
    let pending: Vec<_> = members.iter().filter(|m| m.node.is_empty()).collect();
    assert_eq!(pending.len(), 3, "{members:#?}");
    for shard in 0..3 {
        let placed: Vec<_> = scheduled(&members)
            .into_iter()
            .filter(|m| m.shard == shard)
            .collect();
        let in_zones: BTreeSet<_> = placed.iter().map(|m| zones[&m.node].clone()).collect();
        assert_eq!(placed.len(), 2, "shard {shard}: {placed:#?}");
        assert_eq!(in_zones.len(), 2, "shard {shard} spread: {placed:#?}");
        assert!(
            !in_zones.contains(&cordoned),
            "nothing in the cordoned zone"
        );
    }

    // Preferred: everything runs, two members of each shard share a zone, and
    // the violation is reported.
    let pref = env
        .wait_condition(&ns.name, "pref", "Ready", "True", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", operator.tail(40)));
    let spread = condition(&pref, "TopologySpread").expect("TopologySpread");
    assert_eq!(spread["status"], "False", "{spread}");
    assert_eq!(spread["reason"], "PreferredConstraintExceeded", "{spread}");
    println!("Preferred, zone cordoned: {}", spread["message"]);
    let members = env.members(&ns.name, "pref").unwrap();
    assert_eq!(scheduled(&members).len(), 9, "{members:#?}");
    for shard in 0..3 {
        let of_shard: Vec<_> = members.iter().filter(|m| m.shard == shard).collect();
        let nodes: BTreeSet<_> = of_shard.iter().map(|m| m.node.clone()).collect();
        assert_eq!(nodes.len(), 3, "node Required 1 still holds: {of_shard:#?}");
        assert!(
            of_shard.iter().all(|m| zones[&m.node] != cordoned),
            "nothing new lands in the cordoned zone"
        );
    }
    let password = env.password(&ns.name, "pref").unwrap();
    env.cluster_check(&members[0].ip, &password).unwrap();

    // The zone comes back: the Required cluster's Pending members are scheduled
    // into it and the cluster becomes whole.
    cordon.lift();
    let req = env
        .wait_condition(&ns.name, "req", "Ready", "True", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", operator.tail(40)));
    assert_eq!(
        condition(&req, "TopologySpread").unwrap()["status"],
        "True",
        "{}",
        req["status"]
    );
    let members = env.members(&ns.name, "req").unwrap();
    for shard in 0..3 {
        let in_zones: BTreeSet<_> = members
            .iter()
            .filter(|m| m.shard == shard)
            .map(|m| zones[&m.node].clone())
            .collect();
        assert_eq!(in_zones.len(), 3, "shard {shard}: {members:#?}");
    }
    let password = env.password(&ns.name, "req").unwrap();
    env.cluster_check(&members[0].ip, &password).unwrap();
}
