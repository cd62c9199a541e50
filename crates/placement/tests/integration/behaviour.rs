// Over 600 lines: tests, one scenario per function, read top to bottom.
//! The planner's behaviour, case by case: eligibility (taints, tolerations,
//! cordons, NotReady, nodeSelector, missing keys), room, existing placements,
//! the objective's order, keys that do not nest, reasons, determinism.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use placement::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use Mode::{Preferred, Required};
use TaintEffect::{NoExecute, NoSchedule, PreferNoSchedule};
use TolerationOperator::{Equal, Exists};

/// 3 zones (a, b, c) x `per_zone` nodes in region r1, `pods` slots each.
fn three_zones(shards: u32, replicas: u32, per_zone: usize, pods: u64) -> Problem {
    let mut p = problem(shards, replicas);
    for z in ["a", "b", "c"] {
        for i in 0..per_zone {
            p.nodes.push(zoned(&format!("{z}{i}"), "r1", z, pods));
        }
    }
    p
}

fn zones_of(p: &Problem, plan: &Plan, shard: u32) -> Vec<String> {
    let mut v: Vec<String> = shard_nodes(plan, shard)
        .into_iter()
        .map(|n| {
            let node = p.nodes.iter().find(|x| x.name == n).unwrap();
            node.labels.get(ZONE_KEY).cloned().unwrap_or_default()
        })
        .collect();
    v.sort();
    v
}

/// Plans, checks the plan is well-formed and optimal (when small enough for the
/// exhaustive reference), and returns it.
fn plan_checked(p: &Problem) -> Plan {
    let plan = plan(p).unwrap();
    let got = check_plan(p, &plan);
    let members = p.shards * (p.replicas + 1);
    if (p.nodes.len() as f64 + 1.0).powi(members as i32) <= 2e5 {
        assert_eq!(
            got,
            brute_force(p),
            "not optimal:\n{}",
            render_text(p, &plan)
        );
    }
    plan
}

#[test]
fn shard_members_never_share_a_zone_when_required() {
    let mut p = three_zones(3, 2, 3, 4);
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("node", 1, Required),
    ];
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    for s in 0..3 {
        assert_eq!(zones_of(&p, &plan, s), ["a", "b", "c"]);
    }
}

#[test]
fn required_zone_spread_with_a_zone_cordoned_leaves_members_unplaced_with_the_reason() {
    let mut p = three_zones(3, 2, 3, 4);
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("node", 1, Required),
    ];
    for n in p.nodes.iter_mut().filter(|n| n.name.starts_with('c')) {
        n.unschedulable = true;
    }
    let plan = plan_checked(&p);
    assert!(!plan.feasible);
    assert_eq!(plan.members.len(), 6);
    assert_eq!(plan.unplaced.len(), 3);
    for s in 0..3 {
        assert_eq!(zones_of(&p, &plan, s), ["a", "b"]);
    }
    assert_eq!(
        plan.unplaced[0].reason,
        "shard 0 needs 3 domains of topology.kubernetes.io/zone (Required, maxReplicas 1) \
         but only 2 have eligible nodes with room (9 nodes: 6 eligible, 3 cordoned)"
    );
    // The primary is placed; a replica waits.
    assert!(plan.unplaced.iter().all(|u| u.member != 0));
}

#[test]
fn preferred_zone_spread_with_a_zone_cordoned_places_everything_and_reports_the_violation() {
    let mut p = three_zones(3, 2, 3, 4);
    p.constraints = vec![
        constraint("zone", 1, Preferred),
        constraint("node", 1, Required),
    ];
    for n in p.nodes.iter_mut().filter(|n| n.name.starts_with('c')) {
        n.unschedulable = true;
    }
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    assert_eq!(plan.members.len(), 9);
    assert_eq!(plan.violations.len(), 3);
    for v in &plan.violations {
        assert_eq!(v.topology_key, ZONE_KEY);
        assert_eq!((v.members, v.max_replicas, v.mode), (2, 1, Preferred));
    }
}

#[test]
fn tight_capacity_places_as_many_members_as_fit_and_says_room_is_short() {
    let mut p = problem(2, 2);
    p.nodes = vec![node("n1", &[], 2), node("n2", &[], 2)];
    let plan = plan_checked(&p);
    assert_eq!(plan.members.len(), 4);
    assert_eq!(plan.unplaced.len(), 2);
    let reason = &plan.unplaced[0].reason;
    assert!(reason.contains("not enough room"), "{reason}");
}

#[test]
fn room_counts_requests_against_what_other_pods_use() {
    let mut p = problem(1, 2);
    p.request = Resources {
        cpu_millis: Some(1000),
        memory_bytes: Some(1 << 30),
    };
    let mut busy = node("busy", &[], 110);
    busy.used_by_others = Capacity {
        cpu_millis: 7500,
        memory_bytes: 0,
        pods: 20,
    };
    let mut small = node("small", &[], 110);
    small.allocatable.memory_bytes = 1 << 30;
    p.nodes = vec![busy, small];
    // busy: 500m free -> 0; small: 1 GiB -> 1.
    let plan = plan_checked(&p);
    assert_eq!(plan.members.len(), 1);
    assert_eq!(where_is(&plan, 0, 0), Some("small"));
    assert!(
        plan.unplaced[0]
            .reason
            .contains("room for only 1 of its 3 members"),
        "{}",
        plan.unplaced[0].reason
    );
}

#[test]
fn pod_slots_limit_room_even_when_resources_are_not_requested() {
    let mut p = problem(1, 3);
    let mut n = node("n1", &[], 10);
    n.used_by_others.pods = 8;
    p.nodes = vec![n];
    let plan = plan_checked(&p);
    assert_eq!(plan.members.len(), 2);
}

#[test]
fn noschedule_taints_keep_new_members_off_but_running_members_stay() {
    let mut p = problem(1, 1);
    let mut tainted = node("tainted", &[], 4);
    tainted.taints = vec![taint("dedicated", Some("db"), NoSchedule)];
    p.nodes = vec![tainted, node("free", &[], 4)];
    p.constraints = vec![constraint("node", 1, Required)];
    let fresh = plan_checked(&p);
    assert_eq!(
        fresh.members.len(),
        1,
        "only the untainted node takes a new member"
    );
    p.running = vec![running(0, 1, "tainted")];
    let plan = plan_checked(&p);
    assert_eq!(where_is(&plan, 0, 1), Some("tainted"));
    assert_eq!(where_is(&plan, 0, 0), Some("free"));
    assert!(plan.members.iter().all(|m| !m.moved));
}

#[test]
fn noexecute_taints_evict_running_members() {
    let mut p = problem(1, 1);
    let mut tainted = node("tainted", &[], 4);
    tainted.taints = vec![taint("maintenance", None, NoExecute)];
    p.nodes = vec![tainted, node("a", &[], 4), node("b", &[], 4)];
    p.constraints = vec![constraint("node", 1, Required)];
    p.running = vec![running(0, 0, "tainted"), running(0, 1, "a")];
    let plan = plan_checked(&p);
    assert_eq!(where_is(&plan, 0, 0), Some("b"));
    assert_eq!(where_is(&plan, 0, 1), Some("a"));
    let m0 = plan.members.iter().find(|m| m.member == 0).unwrap();
    assert!(m0.moved && m0.primary);
}

#[test]
fn tolerations_match_taints_the_kubernetes_way() {
    let cases: Vec<(Vec<Toleration>, Taint, bool)> = vec![
        (
            vec![toleration(None, Exists, None, None)],
            taint("any", Some("x"), NoExecute),
            true,
        ),
        (
            vec![toleration(Some("dedicated"), Equal, Some("db"), None)],
            taint("dedicated", Some("db"), NoSchedule),
            true,
        ),
        (
            vec![toleration(Some("dedicated"), Equal, Some("web"), None)],
            taint("dedicated", Some("db"), NoSchedule),
            false,
        ),
        (
            vec![toleration(Some("dedicated"), Exists, None, None)],
            taint("dedicated", Some("db"), NoExecute),
            true,
        ),
        (
            vec![toleration(Some("dedicated"), Exists, None, Some(NoExecute))],
            taint("dedicated", Some("db"), NoSchedule),
            false,
        ),
        (
            vec![toleration(Some("other"), Exists, None, None)],
            taint("dedicated", None, NoSchedule),
            false,
        ),
        (vec![], taint("soft", None, PreferNoSchedule), true),
    ];
    for (tolerations, t, placed) in cases {
        let mut p = problem(1, 0);
        let mut n = node("n1", &[], 4);
        n.taints = vec![t.clone()];
        p.nodes = vec![n];
        p.tolerations = tolerations.clone();
        let plan = plan_checked(&p);
        assert_eq!(plan.members.len() == 1, placed, "{tolerations:?} vs {t:?}");
    }
}

#[test]
fn cordoned_nodes_keep_their_members_but_take_no_new_ones() {
    let mut p = problem(2, 0);
    let mut cordoned = node("cordoned", &[], 4);
    cordoned.unschedulable = true;
    p.nodes = vec![cordoned, node("open", &[], 1)];
    p.running = vec![running(0, 0, "cordoned")];
    let plan = plan_checked(&p);
    assert_eq!(where_is(&plan, 0, 0), Some("cordoned"));
    assert_eq!(where_is(&plan, 1, 0), Some("open"));
}

#[test]
fn not_ready_nodes_lose_their_members() {
    let mut p = problem(1, 1);
    let mut down = node("down", &[], 4);
    down.ready = false;
    p.nodes = vec![down, node("up1", &[], 4), node("up2", &[], 4)];
    p.constraints = vec![constraint("node", 1, Required)];
    p.running = vec![running(0, 0, "down"), running(0, 1, "up1")];
    let plan = plan_checked(&p);
    assert_eq!(where_is(&plan, 0, 0), Some("up2"));
    assert_eq!(where_is(&plan, 0, 1), Some("up1"));
}

#[test]
fn members_on_unknown_nodes_are_placed_anew_and_marked_moved() {
    let mut p = problem(1, 0);
    p.nodes = vec![node("n1", &[], 4)];
    p.running = vec![running(0, 0, "gone")];
    let plan = plan_checked(&p);
    assert_eq!(where_is(&plan, 0, 0), Some("n1"));
    assert!(plan.members[0].moved);
}

#[test]
fn the_node_selector_limits_the_nodes_for_new_and_running_members() {
    let mut p = problem(1, 1);
    p.nodes = vec![
        node("ssd", &[("disk", "ssd")], 4),
        node("hdd", &[("disk", "hdd")], 4),
    ];
    p.node_selector.insert("disk".into(), "ssd".into());
    p.running = vec![running(0, 1, "hdd")];
    let plan = plan_checked(&p);
    assert_eq!(shard_nodes(&plan, 0), ["ssd", "ssd"]);
}

#[test]
fn nodes_without_a_required_key_take_no_member() {
    let mut p = problem(1, 1);
    p.nodes = vec![
        zoned("z1", "r", "a", 4),
        node("bare", &[], 4),
        zoned("z2", "r", "b", 4),
    ];
    p.constraints = vec![constraint("zone", 1, Required)];
    p.running = vec![running(0, 0, "bare")];
    let plan = plan_checked(&p);
    assert_eq!(shard_nodes(&plan, 0), ["z1", "z2"]);
}

#[test]
fn nodes_without_a_preferred_key_form_one_null_domain() {
    let mut p = problem(1, 2);
    p.nodes = vec![
        zoned("z1", "r", "a", 1),
        node("bare1", &[], 1),
        node("bare2", &[], 1),
    ];
    p.constraints = vec![constraint("zone", 1, Preferred)];
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    assert_eq!(plan.violations.len(), 1);
    let v = &plan.violations[0];
    assert_eq!(
        (v.domain.as_deref(), v.members, v.max_replicas),
        (None, 2, 1)
    );
    let bare = plan.members.iter().find(|m| m.node == "bare1").unwrap();
    assert_eq!(bare.domains.get(ZONE_KEY), Some(&None));
}

#[test]
fn a_valid_running_placement_stays_as_it_is() {
    let mut p = three_zones(2, 2, 2, 4);
    p.constraints = vec![constraint("zone", 1, Required)];
    // Not what a fresh plan would choose (both shards on the first nodes).
    p.running = vec![
        running(0, 0, "a0"),
        running(0, 1, "b0"),
        running(0, 2, "c0"),
        running(1, 0, "a0"),
        running(1, 1, "b0"),
        running(1, 2, "c0"),
    ];
    let plan = plan_checked(&p);
    for r in &p.running {
        assert_eq!(where_is(&plan, r.shard, r.member), Some(r.node.as_str()));
    }
    assert!(plan.members.iter().all(|m| !m.moved));
}

#[test]
fn only_the_members_that_must_move_move() {
    let mut p = three_zones(2, 2, 2, 4);
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("node", 1, Required),
    ];
    p.running = vec![
        running(0, 0, "a0"),
        running(0, 1, "b0"),
        running(0, 2, "c0"),
        running(1, 0, "a1"),
        running(1, 1, "b1"),
        running(1, 2, "c1"),
    ];
    p.nodes.iter_mut().find(|n| n.name == "b0").unwrap().ready = false;
    let plan = plan_checked(&p);
    let moved: Vec<(u32, u32)> = plan
        .members
        .iter()
        .filter(|m| m.moved)
        .map(|m| (m.shard, m.member))
        .collect();
    assert_eq!(moved, [(0, 1)]);
    assert_eq!(where_is(&plan, 0, 1), Some("b1"));
}

#[test]
fn less_excess_beats_fewer_moves() {
    // Both members of shard 0 run in zone a; zone b has room. Staying would
    // exceed the Preferred zone limit, so one moves.
    let mut p = problem(1, 1);
    p.nodes = vec![
        zoned("a1", "r", "a", 1),
        zoned("a2", "r", "a", 1),
        zoned("b1", "r", "b", 1),
    ];
    p.constraints = vec![constraint("zone", 1, Preferred)];
    p.running = vec![running(0, 0, "a1"), running(0, 1, "a2")];
    let plan = plan_checked(&p);
    assert!(plan.violations.is_empty());
    assert_eq!(plan.members.iter().filter(|m| m.moved).count(), 1);
    // The primary stays where it is.
    assert_eq!(where_is(&plan, 0, 0), Some("a1"));
}

#[test]
fn more_members_placed_beats_less_excess() {
    let mut p = problem(1, 2);
    p.nodes = vec![
        zoned("a1", "r", "a", 1),
        zoned("a2", "r", "a", 1),
        zoned("b1", "r", "b", 1),
    ];
    p.constraints = vec![constraint("zone", 1, Preferred)];
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    assert_eq!(plan.violations.len(), 1);
}

#[test]
fn fewer_moves_break_ties_in_excess() {
    // Shard 0 runs on a1 and b1; a fresh plan could pick other nodes just as
    // well, but nothing moves.
    let mut p = problem(1, 1);
    p.nodes = vec![
        zoned("a1", "r", "a", 1),
        zoned("a2", "r", "a", 4),
        zoned("b1", "r", "b", 1),
        zoned("b2", "r", "b", 4),
    ];
    p.constraints = vec![constraint("zone", 1, Preferred)];
    p.running = vec![running(0, 0, "a1"), running(0, 1, "b1")];
    let plan = plan_checked(&p);
    assert!(plan.members.iter().all(|m| !m.moved));
}

/// Zones a, b and racks x, y cross: rack x spans both zones.
fn crossing_nodes(p: &mut Problem) {
    for (name, zone, rack) in [
        ("n1", "a", "x"),
        ("n2", "a", "y"),
        ("n3", "b", "x"),
        ("n4", "b", "x"),
        ("n5", "a", "x"),
    ] {
        p.nodes
            .push(node(name, &[("zone", zone), ("example.com/rack", rack)], 1));
    }
}

#[test]
fn keys_that_do_not_nest_are_solved_exactly() {
    // Two shards of two members; zone and rack Required 1. The only way to
    // place all four: each shard takes (a,y)+(b,x) or (a,x)+(b,x)... there is
    // one (a,y) node, so one shard must be short.
    let mut p = problem(2, 1);
    crossing_nodes(&mut p);
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("example.com/rack", 1, Required),
    ];
    let plan = plan_checked(&p);
    assert_eq!(plan.members.len(), 3);
    for s in 0..2 {
        let nodes = shard_nodes(&plan, s);
        let racks: BTreeSet<&str> = nodes
            .iter()
            .map(|n| {
                p.nodes.iter().find(|x| x.name == *n).unwrap().labels["example.com/rack"].as_str()
            })
            .collect();
        assert_eq!(racks.len(), nodes.len(), "shard {s} repeats a rack");
    }
}

#[test]
fn crossing_preferred_keys_trade_excess_exactly() {
    let mut p = problem(2, 1);
    crossing_nodes(&mut p);
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("example.com/rack", 1, Preferred),
    ];
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    let excess: u32 = plan
        .violations
        .iter()
        .map(|v| v.members - v.max_replicas)
        .sum();
    assert_eq!(excess, 1);
}

/// `shards` shards of 3 over `nodes` nodes in 3 zones whose racks (6) are
/// scattered over the zones, so the keys cross: rack Required 1, zone and node
/// Preferred 1, one or two pod slots per node, and the primary of about half
/// the shards already running somewhere. Racks, room and running primaries
/// come from a fixed linear congruential sequence, so the problem is always
/// the same one. At 60 shards on 60 nodes the branch and bound does not prove
/// its optimum within 10 s (measured on the 2-core development machine; 40
/// shards took 20 s and more before the local search, 4 ms with it).
fn crossing_racks(shards: u32, nodes: usize) -> Problem {
    crossing(shards, nodes, false)
}

/// [`crossing_racks`] with a third key that crosses both zones and racks:
/// rows (5), Preferred 1, drawn from the same sequence (the problem of the
/// operator's `plan` CLI tests). Since issue 31 the planner proves the
/// two-key problem's optimum in milliseconds; with three keys that cross
/// pairwise its bound is not tight and the search does not end within 10 s.
fn crossing_racks_and_rows(shards: u32, nodes: usize) -> Problem {
    crossing(shards, nodes, true)
}

fn crossing(shards: u32, nodes: usize, rows: bool) -> Problem {
    let mut state: u64 = 110;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    let mut p = problem(shards, 2);
    for i in 0..nodes {
        let rack = format!("k{}", next() % 6);
        let pods = 1 + (next() % 2) as u64;
        let zone = format!("z{}", i % 3);
        let mut labels = vec![("zone", zone.as_str()), ("example.com/rack", rack.as_str())];
        let row = rows.then(|| format!("r{}", next() % 5));
        if let Some(row) = &row {
            labels.push(("example.com/row", row));
        }
        p.nodes.push(node(&format!("n{i:03}"), &labels, pods));
    }
    p.constraints = vec![
        constraint("zone", 1, Preferred),
        constraint("example.com/rack", 1, Required),
        constraint("node", 1, Preferred),
    ];
    if rows {
        p.constraints
            .insert(2, constraint("example.com/row", 1, Preferred));
    }
    for s in 0..shards {
        if next() % 2 == 0 {
            p.running
                .push(running(s, 0, &format!("n{:03}", next() % nodes)));
        }
    }
    p
}

#[test]
fn a_time_limit_returns_the_best_plan_found_in_time_and_says_it_is_not_proven_optimal() {
    let p = crossing_racks_and_rows(60, 60);
    let limit = Duration::from_millis(100);
    let started = Instant::now();
    let planned = plan_with(
        &p,
        &PlanOptions {
            time_limit: Some(limit),
            ..Default::default()
        },
    )
    .unwrap();
    let took = started.elapsed();
    assert!(!planned.optimal);
    // How far from the optimum it may be: never more members than it leaves
    // unplaced.
    let gap = planned.gap.expect("a gap comes with an unproven plan");
    assert!(gap.unplaced <= planned.plan.unplaced.len() as u64);
    // Well-formed all the same: every member once, room kept, no Required
    // constraint broken.
    check_plan(&p, &planned.plan);
    // The search stops at the first search node past the limit; the slack is
    // for a loaded machine, far below the unbounded search's 20 s and more.
    assert!(took < limit + Duration::from_secs(2), "took {took:?}");
}

#[test]
fn a_time_limit_that_is_not_reached_changes_nothing() {
    let p = crossing_racks(10, 20);
    let planned = plan_with(
        &p,
        &PlanOptions {
            time_limit: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(planned.optimal);
    assert_eq!(planned.plan, plan(&p).unwrap());
}

#[test]
fn the_same_key_may_be_required_and_preferred() {
    // At most 2 per zone, 1 preferred: 3 members on 2 zones -> one excess, never 3 in a zone.
    let mut p = problem(1, 2);
    p.nodes = vec![
        zoned("a1", "r", "a", 4),
        zoned("a2", "r", "a", 4),
        zoned("a3", "r", "a", 4),
        zoned("b1", "r", "b", 4),
    ];
    p.constraints = vec![
        constraint("zone", 2, Required),
        constraint("zone", 1, Preferred),
    ];
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    assert_eq!(zones_of(&p, &plan, 0), ["a", "a", "b"]);
    assert_eq!(plan.violations.len(), 1);
    assert_eq!(plan.violations[0].mode, Preferred);
}

#[test]
fn region_zone_node_nest_and_spread_the_primaries() {
    let mut p = problem(3, 2);
    for r in ["r1", "r2", "r3"] {
        for z in ["a", "b"] {
            for i in 0..2 {
                p.nodes
                    .push(zoned(&format!("{r}{z}{i}"), r, &format!("{r}-{z}"), 2));
            }
        }
    }
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("node", 1, Required),
        constraint("region", 1, Preferred),
    ];
    let plan = plan_checked(&p);
    assert!(plan.feasible && plan.violations.is_empty());
    let regions: BTreeSet<&str> = plan
        .members
        .iter()
        .filter(|m| m.primary)
        .map(|m| m.domains[REGION_KEY].as_deref().unwrap())
        .collect();
    assert_eq!(regions.len(), 3, "one primary per region");
}

#[test]
fn the_live_primary_is_the_one_marked_and_kept_first() {
    let mut p = problem(1, 1);
    p.nodes = vec![node("n1", &[], 1)];
    p.primaries.insert(0, 1);
    p.running = vec![running(0, 0, "n1"), running(0, 1, "n1")];
    let plan = plan_checked(&p);
    assert_eq!(plan.members.len(), 1);
    assert_eq!(plan.members[0].member, 1);
    assert!(plan.members[0].primary);
    assert_eq!(plan.unplaced[0].member, 0);
}

#[test]
fn load_is_balanced_over_nodes() {
    let mut p = problem(2, 1);
    p.nodes = (0..4).map(|i| node(&format!("n{i}"), &[], 4)).collect();
    let plan = plan_checked(&p);
    let used: BTreeSet<&str> = plan.members.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(used.len(), 4);
}

#[test]
fn members_beyond_the_shape_and_duplicate_reports_are_ignored() {
    let mut p = problem(1, 0);
    p.nodes = vec![node("n1", &[], 4), node("n2", &[], 4)];
    p.running = vec![
        running(0, 0, "n2"),
        running(0, 0, "n1"),
        running(5, 0, "n1"),
        running(0, 3, "n1"),
    ];
    // (Not `plan_checked`: the reference assumes one report per member.)
    let plan = plan(&p).unwrap();
    assert_eq!(plan.members.len(), 1);
    assert!(plan.unplaced.is_empty());
    // Of two reports where the member could stay, the first node by name wins.
    assert_eq!(where_is(&plan, 0, 0), Some("n1"));
    assert!(!plan.members[0].moved);
}

#[test]
fn plans_do_not_depend_on_node_order() {
    let mut p = three_zones(4, 2, 3, 2);
    p.constraints = vec![
        constraint("zone", 1, Preferred),
        constraint("node", 1, Required),
    ];
    let a = plan(&p).unwrap();
    p.nodes.reverse();
    let b = plan(&p).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

#[test]
fn aliases_and_resolved_keys_plan_alike() {
    let mut p = three_zones(2, 2, 2, 2);
    p.constraints = vec![constraint("zone", 1, Required)];
    let a = plan(&p).unwrap();
    p.constraints = vec![constraint(ZONE_KEY, 1, Required)];
    assert_eq!(a, plan(&p).unwrap());
    assert!(a.members[0].domains.contains_key(ZONE_KEY));
}

#[test]
fn no_nodes_means_everything_unplaced_with_a_reason() {
    let p = problem(2, 1);
    let plan = plan_checked(&p);
    assert_eq!(plan.unplaced.len(), 4);
    assert_eq!(
        plan.unplaced[0].reason,
        "shard 0 has no eligible node (0 nodes: 0 eligible)"
    );
}

#[test]
fn the_reason_names_the_excluded_nodes() {
    let mut p = problem(1, 0);
    let mut a = node("a", &[], 4);
    a.ready = false;
    let mut b = node("b", &[], 4);
    b.taints = vec![taint("dedicated", Some("db"), NoSchedule)];
    p.nodes = vec![a, b];
    let plan = plan_checked(&p);
    assert_eq!(
        plan.unplaced[0].reason,
        "shard 0 has no eligible node (2 nodes: 0 eligible, 1 NotReady, 1 with untolerated taint dedicated=db:NoSchedule)"
    );
}

#[test]
fn invalid_problems_are_refused_naming_the_field() {
    let field = |p: &Problem| match plan(p) {
        Err(PlanError::Invalid { field, .. }) => field,
        Ok(_) => panic!("accepted"),
    };
    let mut p = problem(0, 1);
    assert_eq!(field(&p), "spec.shards");
    p.shards = 16385;
    assert_eq!(field(&p), "spec.shards");
    p.shards = 16384;
    p.replicas = 1000;
    assert_eq!(field(&p), "spec.replicas");
    p.replicas = 1;
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("node", 0, Required),
    ];
    assert_eq!(field(&p), "spec.replicaSpreadConstraints[1].maxReplicas");
    p.constraints = vec![constraint("Bad Key", 1, Required)];
    assert_eq!(field(&p), "spec.replicaSpreadConstraints[0].topologyKey");
    p.constraints = vec![constraint("", 1, Required)];
    assert_eq!(field(&p), "spec.replicaSpreadConstraints[0].topologyKey");
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint(ZONE_KEY, 2, Required),
    ];
    assert_eq!(field(&p), "spec.replicaSpreadConstraints[1]");
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint(ZONE_KEY, 2, Preferred),
    ];
    p.nodes = vec![node("n", &[], 1), node("n", &[], 1)];
    assert_eq!(field(&p), "nodes[1].name");
    let err = plan(&p).unwrap_err();
    assert_eq!(err.category(), "invalid_spec");
    assert!(err.to_string().starts_with("nodes[1].name: "));
}

#[test]
fn shards_with_nothing_running_are_split_exactly() {
    // 10 fresh shards of 3 over 2 regions: every shard must exceed region
    // Preferred 1 by exactly one, never by two.
    let mut p = problem(10, 2);
    for r in ["r1", "r2"] {
        for z in ["a", "b", "c"] {
            for i in 0..3 {
                p.nodes
                    .push(zoned(&format!("{r}{z}{i}"), r, &format!("{r}-{z}"), 2));
            }
        }
    }
    p.constraints = vec![
        constraint("region", 1, Preferred),
        constraint("zone", 1, Required),
    ];
    let plan = plan_checked(&p);
    assert!(plan.feasible);
    assert_eq!(plan.violations.len(), 10);
    assert!(plan.violations.iter().all(|v| v.members == 2));
}

/// 3 regions x 3 zones x `per_zone` nodes of 4 slots, zone and node Required 1,
/// region Preferred 1: the benchmark's shape.
fn regions_zones_nodes(shards: u32, per_zone: usize) -> Problem {
    let mut p = problem(shards, 2);
    for r in 0..3 {
        for z in 0..3 {
            for n in 0..per_zone {
                p.nodes.push(zoned(
                    &format!("r{r}z{z}n{n}"),
                    &format!("r{r}"),
                    &format!("r{r}-z{z}"),
                    4,
                ));
            }
        }
    }
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("node", 1, Required),
        constraint("region", 1, Preferred),
    ];
    p
}

#[test]
fn a_zone_outage_moves_only_the_members_of_that_zone() {
    let mut p = regions_zones_nodes(30, 4);
    let first = plan_checked(&p);
    assert!(first.feasible && first.violations.is_empty());
    for s in 0..30 {
        let regions: BTreeSet<&str> = first
            .members
            .iter()
            .filter(|m| m.shard == s)
            .map(|m| m.domains[REGION_KEY].as_deref().unwrap())
            .collect();
        assert_eq!(regions.len(), 3, "shard {s} spans the regions");
    }
    p.running = first
        .members
        .iter()
        .map(|m| running(m.shard, m.member, &m.node))
        .collect();
    let lost: BTreeSet<(u32, u32)> = first
        .members
        .iter()
        .filter(|m| m.domains[ZONE_KEY].as_deref() == Some("r0-z0"))
        .map(|m| (m.shard, m.member))
        .collect();
    for n in p.nodes.iter_mut().filter(|n| n.name.starts_with("r0z0")) {
        n.ready = false;
    }
    let second = plan_checked(&p);
    assert!(second.feasible);
    let moved: BTreeSet<(u32, u32)> = second
        .members
        .iter()
        .filter(|m| m.moved)
        .map(|m| (m.shard, m.member))
        .collect();
    assert_eq!(moved, lost);
    // Region r0 keeps 2 zones x 4 nodes x 4 slots = 32 slots for its 30 members:
    // everything fits without excess.
    assert!(second.violations.is_empty());
}

/// 100 shards x 3 on 3 zones x 20 nodes of 5 pods (room for exactly 300
/// members), zone Required 1 and a rack Preferred 1, where the 7 racks cross
/// the zones unevenly (rack = node number mod 7). Every zone is full, so each
/// shard has one member per zone; the racks hold at most 45 members each,
/// under the 100 a rack could take with one member of every shard, so a plan
/// without excess exists (a bipartite multigraph of zones and racks with
/// degree at most 100 splits into 100 matchings: König).
fn crossing_full(racks: usize) -> Problem {
    let mut p = problem(100, 2);
    for z in 0..3 {
        for n in 0..20 {
            let rack = format!("k{}", (z * 20 + n) % racks);
            p.nodes.push(node(
                &format!("z{z}-n{n:02}"),
                &[("zone", &format!("z{z}")), ("example.com/rack", &rack)],
                5,
            ));
        }
    }
    p.constraints = vec![
        constraint("zone", 1, Required),
        constraint("example.com/rack", 1, Preferred),
    ];
    p
}

#[test]
fn crossing_keys_without_room_to_spare_are_planned_at_their_bound() {
    // Before the local search, the search stayed at 9-15 excess after 20 s
    // for these; with it, a few search nodes. The limit keeps a regression
    // from hanging the test: it would show as "not proven optimal".
    for racks in [7, 11, 13] {
        let p = crossing_full(racks);
        let planned = plan_with(
            &p,
            &PlanOptions {
                search_limit: Some(1_000),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(planned.optimal, "{racks} racks: not proven optimal");
        assert_eq!(planned.gap, None);
        assert_eq!(check_plan(&p, &planned.plan), (300, 0, 0), "{racks} racks");
    }
}
