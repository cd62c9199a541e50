//! Issue 31's study: per instance of the uneven-rack family, the plan within
//! the operator's 1 s, the root bound (the score minus the gap of a search cut
//! after one node), and the plan with a long limit when the first is not
//! proven. `cargo run --release -p placement
//! --example uneven_study [long seconds]`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/integration/common/family.rs"]
mod family;

use placement::*;
use std::time::{Duration, Instant};

fn figures(p: &Problem, limit: Duration, nodes: Option<u64>) -> (f64, bool, u64, u64, u64, Gap) {
    let t = Instant::now();
    let planned = plan_with(
        p,
        &PlanOptions {
            time_limit: Some(limit),
            search_limit: nodes,
        },
    )
    .unwrap();
    let took = t.elapsed().as_secs_f64() * 1000.0;
    let excess: u64 = planned
        .plan
        .violations
        .iter()
        .map(|v| u64::from(v.members - v.max_replicas))
        .sum();
    let kept = planned
        .plan
        .members
        .iter()
        .filter(|m| {
            p.running
                .iter()
                .any(|r| r.shard == m.shard && r.member == m.member && r.node == m.node)
        })
        .count();
    (
        took,
        planned.optimal,
        planned.plan.unplaced.len() as u64,
        excess,
        (p.running.len() - kept) as u64,
        planned.gap.unwrap_or_default(),
    )
}

fn main() {
    let long: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let only: Option<String> = std::env::args().nth(2);
    // `wide N`: N more instances drawn at random (seeds 1000..), 1 s only.
    let specs: Vec<family::Uneven> = match only.as_deref() {
        Some("wide") => {
            let n: u64 = std::env::args()
                .nth(3)
                .and_then(|a| a.parse().ok())
                .unwrap_or(50);
            (1000..1000 + n)
                .map(|seed| {
                    let mut rng = family::Rng::new(seed);
                    family::Uneven {
                        shards: 50 + rng.below(284) as u32,
                        racks: 3 + rng.below(5) as usize,
                        tight: rng.below(2) == 0,
                        running: rng.below(2) == 0,
                        seed,
                    }
                })
                .collect()
        }
        _ => family::family(),
    };
    let only = only.filter(|o| o != "wide");
    for spec in specs {
        if only
            .as_ref()
            .is_some_and(|o| !spec.name().contains(o.as_str()))
        {
            continue;
        }
        let p = family::uneven_racks(spec);
        let (t1, opt1, u1, e1, d1, _) = figures(&p, Duration::from_secs(1), None);
        // One search node: its gap is measured from the root's bound.
        let (_, opt0, _, e0, d0, g0) = figures(&p, Duration::from_secs(1), Some(1));
        let line1 = format!(
            "1s: {t1:7.1} ms opt {opt1:5} unpl {u1} exc {e1:2} disp {d1:3} root bound exc {} disp {}{}",
            e0 - g0.excess,
            d0 - g0.displaced,
            if opt0 { " (proven at the root)" } else { "" },
        );
        let long_line = if opt1 || long == 0 {
            String::new()
        } else {
            let (t, opt, u, e, d, g) = figures(&p, Duration::from_secs(long), None);
            format!(
                " | {long}s: {t:7.1} ms opt {opt:5} unpl {u} exc {e:2} disp {d:3} gap {}/{}",
                g.excess, g.displaced
            )
        };
        println!("{:<34} {line1}{long_line}", spec.name());
    }
}
