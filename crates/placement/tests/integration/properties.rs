//! Property tests: on random small problems (random labels, including keys
//! that do not nest; taints, cordons, NotReady nodes; running members; tight
//! capacities) the planner's (placed, excess, displaced) equals that of an
//! exhaustive search, its plans are well-formed, and it is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use placement::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const TAINTS: [(&str, Option<&str>, TaintEffect); 5] = [
    ("dedicated", Some("db"), TaintEffect::NoSchedule),
    ("dedicated", Some("db"), TaintEffect::NoExecute),
    ("gpu", None, TaintEffect::PreferNoSchedule),
    ("spot", Some("yes"), TaintEffect::NoSchedule),
    ("spot", Some("yes"), TaintEffect::NoExecute),
];
const KEYS: [&str; 4] = ["zone", "region", "node", "example.com/rack"];

#[derive(Debug, Clone)]
struct NodeSpec {
    ready: bool,
    cordoned: bool,
    taint: Option<usize>,
    zone: Option<u8>,
    region: Option<u8>,
    rack: Option<u8>,
    hostname: bool,
    ssd: bool,
    pods: u64,
    cpu_used: u64,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.25, 0..TAINTS.len()),
        prop::option::weighted(0.85, 0u8..2),
        prop::option::weighted(0.8, 0u8..2),
        prop::option::weighted(0.8, 0u8..2),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.8),
        prop_oneof![1 => Just(0u64), 6 => 1u64..=3],
        0u64..=2,
    )
        .prop_map(
            |(ready, cordoned, taint, zone, region, rack, hostname, ssd, pods, cpu_used)| {
                NodeSpec {
                    ready,
                    cordoned,
                    taint,
                    zone,
                    region,
                    rack,
                    hostname,
                    ssd,
                    pods,
                    cpu_used,
                }
            },
        )
}

fn build_node(i: usize, s: &NodeSpec) -> NodeInfo {
    let mut labels = BTreeMap::new();
    if s.hostname {
        labels.insert(HOSTNAME_KEY.to_string(), format!("n{i}"));
    }
    if let Some(z) = s.zone {
        labels.insert(ZONE_KEY.to_string(), ["a", "b"][z as usize].to_string());
    }
    if let Some(r) = s.region {
        labels.insert(REGION_KEY.to_string(), ["r1", "r2"][r as usize].to_string());
    }
    if let Some(r) = s.rack {
        labels.insert(
            "example.com/rack".to_string(),
            ["x", "y"][r as usize].to_string(),
        );
    }
    if s.ssd {
        labels.insert("disk".to_string(), "ssd".to_string());
    }
    NodeInfo {
        name: format!("n{i}"),
        labels,
        ready: s.ready,
        unschedulable: s.cordoned,
        taints: s
            .taint
            .map(|t| {
                let (k, v, e) = TAINTS[t];
                vec![taint(k, v, e)]
            })
            .unwrap_or_default(),
        allocatable: Capacity {
            cpu_millis: 2000,
            memory_bytes: 8 << 30,
            pods: s.pods,
        },
        used_by_others: Capacity {
            cpu_millis: s.cpu_used * 500,
            memory_bytes: 0,
            pods: 0,
        },
    }
}

fn tolerations(bits: u8) -> Vec<Toleration> {
    use TaintEffect::*;
    use TolerationOperator::*;
    let all = [
        toleration(None, Exists, None, None),
        toleration(Some("dedicated"), Equal, Some("db"), None),
        toleration(Some("dedicated"), Exists, None, Some(NoSchedule)),
        toleration(Some("spot"), Equal, Some("yes"), Some(NoExecute)),
    ];
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0 && (*i != 0 || bits & 0x10 != 0))
        .map(|(_, t)| t)
        .collect()
}

/// A random problem small enough for the exhaustive reference.
fn small_problem(
    max_members: u32,
    max_nodes: usize,
    required: f64,
) -> impl Strategy<Value = Problem> {
    (1u32..=3, 0u32..=2)
        .prop_filter("small enough", move |(s, r)| s * (r + 1) <= max_members)
        .prop_flat_map(move |(shards, replicas)| {
            let members = (shards * (replicas + 1)) as usize;
            (
                Just((shards, replicas)),
                prop::collection::vec(node_spec(), 1..=max_nodes),
                prop::collection::vec(
                    (0..KEYS.len(), 1u32..=2, prop::bool::weighted(required)),
                    0..=3,
                ),
                any::<u8>(),
                prop::bool::weighted(0.3),
                prop::option::weighted(0.5, 1u64..=2),
                prop::collection::vec(prop::option::weighted(0.4, 0usize..=max_nodes), members),
                prop::option::of(0u32..=2),
            )
        })
        .prop_map(
            |(
                (shards, replicas),
                nodes,
                constraints,
                tol_bits,
                selector,
                cpu,
                running,
                primary,
            )| {
                let mut p = problem(shards, replicas);
                p.nodes = nodes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| build_node(i, s))
                    .collect();
                let mut seen = std::collections::BTreeSet::new();
                for (k, max, required) in constraints {
                    let mode = if required {
                        Mode::Required
                    } else {
                        Mode::Preferred
                    };
                    if seen.insert((k, required)) {
                        p.constraints.push(constraint(KEYS[k], max, mode));
                    }
                }
                p.tolerations = tolerations(tol_bits);
                if selector {
                    p.node_selector.insert("disk".into(), "ssd".into());
                }
                p.request.cpu_millis = cpu.map(|c| c * 500);
                let m = replicas + 1;
                for (k, at) in running.into_iter().enumerate() {
                    if let Some(n) = at {
                        let name = if n < p.nodes.len() {
                            format!("n{n}")
                        } else {
                            "gone".into()
                        };
                        p.running
                            .push(running_member(k as u32 / m, k as u32 % m, &name));
                    }
                }
                if let Some(q) = primary {
                    p.primaries.insert(0, q);
                }
                p
            },
        )
}

fn running_member(shard: u32, member: u32, node: &str) -> RunningMember {
    running(shard, member, node)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// The heart of the contract: the optimum, in the order.
    #[test]
    fn plan_matches_the_exhaustive_optimum(p in small_problem(5, 4, 0.4)) {
        let plan = plan(&p).unwrap();
        let got = check_plan(&p, &plan);
        let want = brute_force(&p);
        prop_assert_eq!(got, want, "plan:\n{}", render_text(&p, &plan));
    }

    /// The same, with mostly Preferred constraints: excess and the trade
    /// between excess and displacement.
    #[test]
    fn plan_matches_the_exhaustive_optimum_with_preferred_constraints(p in small_problem(5, 4, 0.1)) {
        let plan = plan(&p).unwrap();
        let got = check_plan(&p, &plan);
        let want = brute_force(&p);
        prop_assert_eq!(got, want, "plan:\n{}", render_text(&p, &plan));
    }

    /// Larger problems (up to 3 shards of 3 members on 8 nodes) against the
    /// per-shard-counts reference, which also cross-checks the two references.
    #[test]
    fn plan_matches_the_counting_reference_on_larger_problems(p in small_problem(9, 8, 0.3)) {
        let plan = plan(&p).unwrap();
        let got = check_plan(&p, &plan);
        let want = brute_force_by_counts(&p);
        prop_assert_eq!(got, want, "plan:\n{}", render_text(&p, &plan));
        let members = p.shards * (p.replicas + 1);
        if members <= 4 {
            prop_assert_eq!(want, brute_force(&p));
        }
    }

    /// Every member appears exactly once, no room is exceeded, no Required
    /// constraint is broken, flags and violations are consistent (all checked
    /// by `check_plan`), on problems too big for the exhaustive reference.
    #[test]
    fn plans_are_well_formed_on_larger_problems(p in small_problem(9, 8, 0.4)) {
        let plan = plan(&p).unwrap();
        check_plan(&p, &plan);
    }

    /// A search limit still gives a well-formed plan, and one that says it is
    /// optimal is.
    #[test]
    fn a_search_limit_gives_valid_plans_and_flags_unproven_ones(p in small_problem(5, 4, 0.4)) {
        let limited = plan_with(&p, &PlanOptions { search_limit: Some(1), ..Default::default() }).unwrap();
        let got = check_plan(&p, &limited.plan);
        if limited.optimal {
            prop_assert_eq!(got, brute_force(&p));
        }
        let full = plan_with(&p, &PlanOptions::default()).unwrap();
        prop_assert!(full.optimal);
        prop_assert_eq!(full.plan, plan(&p).unwrap());
    }

    /// Same input, same plan, whatever the order of nodes and running members.
    #[test]
    fn plans_do_not_depend_on_input_order(p in small_problem(6, 6, 0.4)) {
        let a = plan(&p).unwrap();
        let mut q = p.clone();
        q.nodes.reverse();
        q.running.reverse();
        let b = plan(&q).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a, plan(&p).unwrap());
    }
}

/// Issue 31 in small: zones and racks that cross (every rack in every zone,
/// one or two nodes per cell), uneven room, a few cordoned nodes, running
/// members; the zone, rack and node constraints each Required or Preferred.
fn crossing_problem() -> impl Strategy<Value = Problem> {
    (2usize..=3, 2usize..=3, 2u32..=3, 1u32..=2)
        .prop_filter("small enough for the reference", |(z, r, s, _)| {
            z * r <= 6 && *s <= 3
        })
        .prop_flat_map(|(zones, racks, shards, replicas)| {
            let cells = zones * racks;
            let members = (shards * (replicas + 1)) as usize;
            (
                Just((zones, racks, shards, replicas)),
                // Per cell: a second node or not, each node's pods, and
                // whether the first is cordoned (running members may stay).
                prop::collection::vec(
                    (
                        prop::bool::weighted(0.2),
                        0u64..=2,
                        0u64..=2,
                        prop::bool::weighted(0.15),
                    ),
                    cells,
                ),
                (
                    prop::bool::weighted(0.8),
                    prop::bool::weighted(0.3),
                    prop::bool::weighted(0.5),
                ),
                prop::collection::vec(prop::option::weighted(0.35, 0usize..12), members),
            )
        })
        .prop_map(
            |((zones, racks, shards, replicas), cells, modes, running)| {
                let mode = |required: bool| {
                    if required {
                        Mode::Required
                    } else {
                        Mode::Preferred
                    }
                };
                let mut p = problem(shards, replicas);
                for (c, &(second, pods_a, pods_b, cordoned)) in cells.iter().enumerate() {
                    let (z, r) = (c / racks, c % racks);
                    let labels = [
                        ("zone", format!("z{z}")),
                        ("example.com/rack", format!("k{r}")),
                    ];
                    let labels: Vec<(&str, &str)> =
                        labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    p.nodes.push(node(&format!("n{c}a"), &labels, pods_a));
                    p.nodes.last_mut().unwrap().unschedulable = cordoned;
                    if second {
                        p.nodes.push(node(&format!("n{c}b"), &labels, pods_b));
                    }
                }
                p.constraints = vec![
                    constraint("zone", 1, mode(modes.0)),
                    constraint("example.com/rack", 1, mode(modes.1)),
                    constraint("node", 1, mode(modes.2)),
                ];
                let m = replicas + 1;
                for (k, at) in running.into_iter().enumerate() {
                    if let Some(n) = at.filter(|&n| n < p.nodes.len()) {
                        let name = p.nodes[n].name.clone();
                        p.running
                            .push(running_member(k as u32 / m, k as u32 % m, &name));
                    }
                }
                let _ = zones;
                p
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// Crossing zones and racks: the planner's optimum is the exhaustive one,
    /// and the first incumbent (one search node: the relaxations' placements
    /// after the local search) is well-formed and, when it says it is
    /// optimal, is.
    #[test]
    fn crossing_racks_plan_matches_the_counting_reference(p in crossing_problem()) {
        let want = brute_force_by_counts(&p);
        let planned = plan(&p).unwrap();
        prop_assert_eq!(check_plan(&p, &planned), want, "plan:\n{}", render_text(&p, &planned));
        let first = plan_with(&p, &PlanOptions { search_limit: Some(1), ..Default::default() }).unwrap();
        let got = check_plan(&p, &first.plan);
        if first.optimal {
            prop_assert_eq!(got, want);
        } else {
            // The gap covers the distance to the optimum.
            let gap = first.gap.unwrap();
            prop_assert!(want.0 <= got.0 + gap.unplaced);
            if got.0 == want.0 {
                prop_assert!(got.1 <= want.1 + gap.excess);
            }
        }
    }
}
