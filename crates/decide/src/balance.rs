//! Where primaries should be: the failover target the operator prefers when
//! it must promote a replica, and the one move that best restores the spread
//! of live primaries (primary balancing). Pure.
//!
//! Spread is measured per topology key, from the widest (fewest distinct
//! values, e.g. region) to the narrowest (the node, always included so two
//! primaries never share a node while another node could hold one): for each
//! key the sum over domains of (primaries in the domain)^2, compared
//! lexicographically. The sum of squares is smallest when primaries are as
//! even as the members allow, i.e. at most ceil(shards / domains) per domain
//! where possible.

use crate::facts::Facts;
pub use crate::facts::{Candidate, Domains, ShardView, keys_widest_first};
use api::v1alpha1::BalancingMode;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Lexicographic spread cost of a set of primary domains.
fn cost(primaries: &[&Domains], keys: &[String]) -> Vec<u64> {
    keys.iter()
        .map(|k| {
            let mut counts: BTreeMap<Option<&String>, u64> = BTreeMap::new();
            for d in primaries {
                *counts.entry(d.get(k)).or_default() += 1;
            }
            counts.values().map(|c| c * c).sum()
        })
        .collect()
}

fn primary_domains(shards: &[ShardView], except: Option<u32>) -> Vec<&Domains> {
    shards
        .iter()
        .filter(|s| Some(s.shard) != except)
        .filter_map(|s| {
            let p = s.primary?;
            s.members.iter().find(|m| m.member == p)?.domains.as_ref()
        })
        .collect()
}

/// The order in which the operator would promote the replicas of `shard`
/// (when it must pick one: before restarting or removing the primary): the
/// replicas whose domain keeps the primaries of the *other* shards spread best
/// first, ties by member index. In-sync-ness is checked by the Valkey planner
/// at the time of the failover.
pub fn failover_preference(shards: &[ShardView], shard: u32, keys: &[String]) -> Vec<u32> {
    let Some(view) = shards.iter().find(|s| s.shard == shard) else {
        return Vec::new();
    };
    let others = primary_domains(shards, Some(shard));
    let mut scored: Vec<(Vec<u64>, u32)> = view
        .members
        .iter()
        .filter(|m| Some(m.member) != view.primary)
        .map(|m| {
            let c = match &m.domains {
                Some(d) => {
                    let mut all = others.clone();
                    all.push(d);
                    cost(&all, keys)
                }
                // Unknown place: last.
                None => vec![u64::MAX; keys.len()],
            };
            (c, m.member)
        })
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, m)| m).collect()
}

/// The single primary move that improves the spread the most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub shard: u32,
    pub from: u32,
    pub to: u32,
    /// The target is an in-sync replica now (only then may the move be made).
    pub ready: bool,
}

/// The best single move (one shard at a time), or `None` when no move of one
/// primary makes the spread strictly better. Among equally good moves, one
/// to an in-sync replica wins, then the lowest shard and member.
pub fn best_move(shards: &[ShardView], keys: &[String]) -> Option<Move> {
    let current = cost(&primary_domains(shards, None), keys);
    let mut best: Option<(Vec<u64>, bool, Move)> = None;
    for s in shards {
        let Some(from) = s.primary else { continue };
        // A primary whose place is unknown cannot be judged.
        if !s
            .members
            .iter()
            .any(|m| m.member == from && m.domains.is_some())
        {
            continue;
        }
        let others = primary_domains(shards, Some(s.shard));
        for m in s.members.iter().filter(|m| m.member != from) {
            let Some(d) = &m.domains else { continue };
            let mut all = others.clone();
            all.push(d);
            let c = cost(&all, keys);
            if c >= current {
                continue;
            }
            let candidate = Move {
                shard: s.shard,
                from,
                to: m.member,
                ready: m.in_sync,
            };
            // Ties: an in-sync target first, then a move back to member 0
            // (the shard's planned primary: "fail back"), then the lowest shard.
            let key = (c.clone(), !m.in_sync, m.member != 0);
            let better = match &best {
                None => true,
                Some((bc, bready, bm)) => key < (bc.clone(), !*bready, bm.to != 0),
            };
            if better {
                best = Some((c, m.in_sync, candidate));
            }
        }
    }
    best.map(|(_, _, m)| m)
}

/// Primary balancing: after the quiet period, one shard at a time, only
/// while the cluster is Ready, move one primary to an in-sync replica in a
/// better domain. Returns where balancing stands, the failover to make
/// now (shard, to member), if any, and, while the quiet period holds a
/// failover back, how long it still does (the reconcile looks again then,
/// not only at the next resync).
pub fn balancing(
    f: &Facts<'_>,
    cluster_ready: bool,
    last_disturbance: Option<Instant>,
    now: Instant,
) -> (BalanceState, Option<(u32, u32)>, Option<Duration>) {
    let Some(mv) = best_move(&f.shards, &f.keys) else {
        return (BalanceState::Aligned, None, None);
    };
    let what = format!(
        "shard {}: primary should move from member {} to member {}",
        mv.shard, mv.from, mv.to
    );
    let cluster = f.cluster;
    if cluster.primary_balancing.mode == BalancingMode::Off {
        return (
            BalanceState::Off(format!("{what} (primaryBalancing.mode is Off)")),
            None,
            None,
        );
    }
    if !mv.ready {
        return (
            BalanceState::Impossible(format!("{what}, but that replica is not in sync")),
            None,
            None,
        );
    }
    if !cluster_ready {
        return (
            BalanceState::Pending(format!("{what} once the cluster is Ready")),
            None,
            None,
        );
    }
    let quiet = cluster.primary_balancing.quiet_period;
    if let Some(t) = last_disturbance {
        let elapsed = now.duration_since(t);
        if elapsed < quiet {
            // No countdown in the message: the status must not change (and
            // be written) on every reconcile while nothing happens.
            return (
                BalanceState::Pending(format!(
                    "{what} after a quiet period of {} s",
                    quiet.as_secs()
                )),
                None,
                Some(quiet - elapsed),
            );
        }
    }
    (
        BalanceState::Pending(format!("{what}: failing over")),
        Some((mv.shard, mv.to)),
        None,
    )
}

/// Where primary balancing stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BalanceState {
    Aligned,
    /// A move is wanted; the message says which and what it waits for.
    Pending(String),
    /// A move is wanted but cannot be made (no in-sync replica in the right domain...).
    Impossible(String),
    /// `primaryBalancing.mode: Off` and primaries are not balanced.
    Off(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::{HOSTNAME_KEY, ZONE_KEY};

    fn d(node: &str, zone: &str) -> Option<Domains> {
        Some(BTreeMap::from([
            (HOSTNAME_KEY.to_string(), node.to_string()),
            (ZONE_KEY.to_string(), zone.to_string()),
        ]))
    }

    fn keys() -> Vec<String> {
        vec![ZONE_KEY.to_string(), HOSTNAME_KEY.to_string()]
    }

    fn shard(shard: u32, primary: u32, places: &[(&str, &str)]) -> ShardView {
        ShardView {
            shard,
            primary: Some(primary),
            members: places
                .iter()
                .enumerate()
                .map(|(i, (n, z))| Candidate {
                    member: i as u32,
                    domains: d(n, z),
                    in_sync: true,
                })
                .collect(),
        }
    }

    /// 3 shards x 3 members over zones a, b, c, one member of each shard per zone.
    fn spread_cluster(primaries: [u32; 3]) -> Vec<ShardView> {
        vec![
            shard(0, primaries[0], &[("a1", "a"), ("b1", "b"), ("c1", "c")]),
            shard(1, primaries[1], &[("b2", "b"), ("c2", "c"), ("a2", "a")]),
            shard(2, primaries[2], &[("c3", "c"), ("a3", "a"), ("b3", "b")]),
        ]
    }

    #[test]
    fn the_quiet_period_says_how_long_it_still_holds_a_failover_back() {
        let c = resources::adapt::fixtures::cluster(
            "shards: 3\nreplicas: 2\nprimaryBalancing: {quietPeriodSeconds: 10}",
        );
        let kube = crate::view::KubeView::default();
        let valkey = valkey::model::ObservedCluster::default();
        let f = Facts {
            cluster: &c,
            kube: &kube,
            valkey: &valkey,
            now: "2026-01-01T00:00:00Z".parse().unwrap(),
            keys: keys(),
            primaries: BTreeMap::new(),
            shards: spread_cluster([1, 0, 0]),
            password_stale: Default::default(),
        };
        let now = Instant::now();
        let disturbed = now - Duration::from_secs(4);
        let (state, failover, wake) = balancing(&f, true, Some(disturbed), now);
        assert!(matches!(state, BalanceState::Pending(_)), "{state:?}");
        assert_eq!(failover, None);
        assert_eq!(wake, Some(Duration::from_secs(6)));
        // Once it has passed: the failover, and nothing to wait for.
        let later = disturbed + Duration::from_secs(10);
        let (_, failover, wake) = balancing(&f, true, Some(disturbed), later);
        assert_eq!(failover, Some((0, 0)));
        assert_eq!(wake, None);
        // Not Ready: no failover and no wake (a change will reconcile it).
        let (_, failover, wake) = balancing(&f, false, Some(disturbed), now);
        assert_eq!((failover, wake), (None, None));
    }

    #[test]
    fn balanced_primaries_need_no_move() {
        assert_eq!(best_move(&spread_cluster([0, 0, 0]), &keys()), None);
    }

    #[test]
    fn two_primaries_in_one_zone_move_back_to_the_empty_zone() {
        // Shard 0's primary failed over to b1: zones a:0 b:2 c:1.
        let shards = spread_cluster([1, 0, 0]);
        let m = best_move(&shards, &keys()).unwrap();
        // Moving shard 0 back to a1 or shard 1 to its zone-a member both fix it;
        // both cost the same: failing back to member 0 wins.
        assert_eq!(
            m,
            Move {
                shard: 0,
                from: 1,
                to: 0,
                ready: true
            }
        );
    }

    #[test]
    fn an_equal_move_back_to_member_zero_wins() {
        // Shard 1's primary failed over from b2 to its zone-a member a2:
        // zones a:2 (a1, a2) c:1. Moving shard 0 to b1 or shard 1 back to b2
        // both fix it; shard 1 fails back to member 0.
        let shards = spread_cluster([0, 2, 0]);
        let m = best_move(&shards, &keys()).unwrap();
        assert_eq!(
            m,
            Move {
                shard: 1,
                from: 2,
                to: 0,
                ready: true
            }
        );
    }

    #[test]
    fn a_replica_behind_is_reported_but_not_ready() {
        let mut shards = spread_cluster([1, 0, 0]);
        shards[0].members[0].in_sync = false;
        shards[1].members[2].in_sync = false;
        let m = best_move(&shards, &keys()).unwrap();
        assert!(!m.ready);
    }

    #[test]
    fn an_in_sync_target_wins_over_an_equal_one_that_is_behind() {
        let mut shards = spread_cluster([1, 0, 0]);
        shards[0].members[0].in_sync = false;
        let m = best_move(&shards, &keys()).unwrap();
        assert_eq!(
            m,
            Move {
                shard: 1,
                from: 0,
                to: 2,
                ready: true
            }
        );
    }

    #[test]
    fn the_failover_target_is_the_replica_in_the_zone_without_a_primary() {
        // Shard 0 primary a1 is going away; shards 1 and 2 have primaries in b and c.
        let shards = vec![
            shard(0, 0, &[("a1", "a"), ("b1", "b"), ("a9", "a")]),
            shard(1, 0, &[("b2", "b"), ("c2", "c")]),
            shard(2, 0, &[("c3", "c"), ("a3", "a")]),
        ];
        assert_eq!(failover_preference(&shards, 0, &keys()), vec![2, 1]);
    }

    #[test]
    fn two_primaries_never_share_a_node_when_another_node_can_hold_one() {
        // No constraint keys: only the node counts.
        let host = vec![HOSTNAME_KEY.to_string()];
        let shards = vec![
            shard(0, 0, &[("n1", "a"), ("n2", "a")]),
            shard(1, 0, &[("n1", "a"), ("n3", "a")]),
        ];
        let m = best_move(&shards, &host).unwrap();
        assert_eq!((m.shard, m.to), (0, 1));
    }

    #[test]
    fn keys_are_ordered_widest_first_and_the_node_comes_last() {
        let n = |z: &str, r: &str, h: &str| {
            BTreeMap::from([
                (ZONE_KEY.to_string(), z.to_string()),
                (placement::REGION_KEY.to_string(), r.to_string()),
                (HOSTNAME_KEY.to_string(), h.to_string()),
            ])
        };
        let nodes = [n("a", "r1", "h1"), n("b", "r1", "h2"), n("c", "r2", "h3")];
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let k = keys_widest_first(
            &[
                HOSTNAME_KEY.to_string(),
                ZONE_KEY.to_string(),
                placement::REGION_KEY.to_string(),
            ],
            &refs,
        );
        assert_eq!(
            k,
            vec![
                placement::REGION_KEY.to_string(),
                ZONE_KEY.to_string(),
                HOSTNAME_KEY.to_string()
            ]
        );
    }
}
