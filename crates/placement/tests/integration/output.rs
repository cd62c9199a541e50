//! The plan's outputs: the `--output json` shape (a public contract) and the
//! text map.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use placement::*;
use std::collections::BTreeMap;

#[test]
fn plan_json_has_exactly_the_documented_shape() {
    let plan = Plan {
        cluster: "name".into(),
        feasible: false,
        members: vec![PlacedMember {
            shard: 0,
            member: 0,
            node: "n1".into(),
            primary: true,
            moved: false,
            domains: BTreeMap::from([
                (ZONE_KEY.to_string(), Some("a".to_string())),
                (HOSTNAME_KEY.to_string(), Some("n1".to_string())),
                (REGION_KEY.to_string(), None),
            ]),
        }],
        unplaced: vec![UnplacedMember {
            shard: 0,
            member: 2,
            reason: "no room".into(),
        }],
        violations: vec![Violation {
            shard: 0,
            topology_key: ZONE_KEY.into(),
            domain: None,
            members: 3,
            max_replicas: 2,
            mode: Mode::Preferred,
        }],
    };
    assert_eq!(
        serde_json::to_string(&plan).unwrap(),
        concat!(
            r#"{"cluster":"name","feasible":false,"#,
            r#""members":[{"shard":0,"member":0,"node":"n1","primary":true,"moved":false,"#,
            r#""domains":{"kubernetes.io/hostname":"n1","topology.kubernetes.io/region":null,"topology.kubernetes.io/zone":"a"}}],"#,
            r#""unplaced":[{"shard":0,"member":2,"reason":"no room"}],"#,
            r#""violations":[{"shard":0,"topologyKey":"topology.kubernetes.io/zone","domain":null,"#,
            r#""members":3,"maxReplicas":2,"mode":"Preferred"}]}"#
        )
    );
}

/// 4 members, node Required 1 and zone Preferred 1 on one zoned node and two
/// without a zone: 3 placed (2 in the null zone domain), 1 unplaced.
fn null_domain_problem() -> Problem {
    let mut p = problem(1, 3);
    p.nodes = vec![
        zoned("a1", "r1", "a", 1),
        node("bare1", &[], 1),
        node("bare2", &[], 1),
    ];
    p.constraints = vec![
        constraint("zone", 1, Mode::Preferred),
        constraint("node", 1, Mode::Required),
    ];
    p
}

#[test]
fn planned_json_reports_null_domains_and_every_member() {
    let p = null_domain_problem();
    let plan = plan(&p).unwrap();
    let v: serde_json::Value = serde_json::to_value(&plan).unwrap();
    assert_eq!(v["cluster"], "demo");
    assert_eq!(v["feasible"], false);
    assert_eq!(v["members"].as_array().unwrap().len(), 3);
    assert_eq!(v["unplaced"].as_array().unwrap().len(), 1);
    let bare = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node"] == "bare1")
        .unwrap();
    assert_eq!(bare["domains"][ZONE_KEY], serde_json::Value::Null);
    assert_eq!(bare["domains"][HOSTNAME_KEY], "bare1");
    assert_eq!(
        v["violations"],
        serde_json::json!([{"shard": 0, "topologyKey": ZONE_KEY, "domain": null,
                            "members": 2, "maxReplicas": 1, "mode": "Preferred"}])
    );
    assert_eq!(
        v["unplaced"][0]["reason"],
        "shard 0 needs 4 domains of kubernetes.io/hostname (Required, maxReplicas 1) \
         but only 3 have eligible nodes with room (3 nodes: 3 eligible)"
    );
}

#[test]
fn text_map_draws_regions_zones_nodes_members_violations_and_unplaced() {
    let mut p = null_domain_problem();
    let mut down = zoned("b1", "r1", "b", 1);
    down.ready = false;
    p.nodes.push(down);
    p.running = vec![running(0, 1, "b1")];
    let plan = plan(&p).unwrap();
    let text = render_text(&p, &plan);
    let expected = [
        "cluster demo: 1 shard x 4 members, 3 placed, 1 unplaced, 1 Preferred violation",
        "constraints: topology.kubernetes.io/zone maxReplicas 1 (Preferred), kubernetes.io/hostname maxReplicas 1 (Required)",
        "region r1",
        "  zone a",
        "    node a1",
        "  zone b",
        "    node b1       0/1  - [NotReady]",
        "region (no region label)",
        "  zone (no zone label)",
        "    node bare1",
        "violations (Preferred constraints exceeded):",
        "  shard 0: 2 members in nodes without topology.kubernetes.io/zone (Preferred, maxReplicas 1)",
        "unplaced:",
        "  s0/m3 replica: shard 0 needs 4 domains",
    ];
    for line in expected {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(text.contains("s0/m0 primary"), "{text}");
    assert!(text.contains("s0/m1 replica (moved)"), "{text}");
    // Regions, zones and nodes appear in order.
    let at = |s: &str| text.find(s).unwrap();
    assert!(at("region r1") < at("zone a") && at("zone a") < at("zone b"));
    assert!(at("zone b") < at("region (no region label)"));
    assert!(at("node bare1") < at("node bare2"));
}
