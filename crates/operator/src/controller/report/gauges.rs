//! The gauges a reconcile leaves for Prometheus (pure): what the status says
//! ([`ClusterGauges::of`]), and what it does not carry: the placement plan's
//! excess and unplaced members, the primaries balancing would move, and each
//! replica's replication link and lag.

use crate::metrics::{ClusterGauges, ReplicaGauges};
use api::v1alpha1::ValkeyClusterStatus;
use decide::balance;
use decide::facts::ShardView;
use decide::facts::{Facts, report_of};
use decide::placement::Placement;
use std::collections::BTreeMap;
use valkey::model::{MemberIndex, ObservedCluster};
use valkey::parse::Role;

/// The gauges of one reconcile that wrote `status`.
pub fn of(f: &Facts<'_>, placement: &Placement, status: &ValkeyClusterStatus) -> ClusterGauges {
    let (violations, unplaced, optimal) = match placement {
        Placement::Planned { plan, gap } => {
            (plan.violations.len(), plan.unplaced.len(), gap.is_none())
        }
        Placement::Failed(_) => (0, 0, false),
    };
    ClusterGauges {
        primaries_misplaced: count(primaries_misplaced(&f.shards, &f.keys)),
        preferred_spread_violations: count(violations),
        members_unplaced: count(unplaced),
        plan_optimal: optimal,
        replicas: replicas(f.valkey, &f.primaries),
        ..ClusterGauges::of(f.cluster.shards, f.cluster.replicas, status)
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How many primaries could move to a replica in a better domain now: each
/// shard judged by primary balancing's own rule ([`balance::best_move`])
/// with every other primary where it is. 0 exactly when balancing finds
/// nothing to do (PrimaryPlacementAligned), and counted whatever
/// `primaryBalancing.mode` says or waits for: the gauge tells where the
/// primaries are, not what the operator does about it. Balancing moves one
/// primary at a time and judges again, so fewer than this may end up moving
/// (three primaries in one of three zones count 3; two moves spread them).
///
/// A cluster with nothing to move costs one balancing decision (what the
/// balancer itself pays each reconcile); one with misplaced primaries one
/// more decision per shard, each looking at the judged shard's members
/// alone (about 0.2 s for 400 shards, 40 ms for 200). Playing balancing's
/// moves out one by one would cost a full decision per move instead.
pub fn primaries_misplaced(shards: &[ShardView], keys: &[String]) -> usize {
    if balance::best_move(shards, keys).is_none() {
        return 0;
    }
    // Every shard with its primary alone: no move of it is considered.
    let mut judged: Vec<ShardView> = shards
        .iter()
        .map(|s| ShardView {
            shard: s.shard,
            primary: s.primary,
            members: s
                .members
                .iter()
                .filter(|m| Some(m.member) == s.primary)
                .cloned()
                .collect(),
        })
        .collect();
    let mut misplaced = 0;
    for (i, shard) in shards.iter().enumerate() {
        let alone = std::mem::replace(&mut judged[i].members, shard.members.clone());
        if balance::best_move(&judged, keys).is_some() {
            misplaced += 1;
        }
        judged[i].members = alone;
    }
    misplaced
}

/// Every member that answered as a replica: its link as it reports it, and
/// how far it is behind the shard's live primary when it replicates that
/// primary (the offsets of two nodes that do not share a stream say nothing).
/// The lag is `master_repl_offset - slave_repl_offset`, 0 when the replica,
/// asked later, is ahead of the primary's answer (as
/// [`valkey::planner::replica_sync`] counts it).
pub fn replicas(obs: &ObservedCluster, primaries: &BTreeMap<u32, u32>) -> Vec<ReplicaGauges> {
    obs.members
        .iter()
        .filter_map(|m| {
            let report = m.report()?;
            if report.role() != Role::Replica {
                return None;
            }
            let shard = m.member.shard.0;
            let member = match m.member.member {
                MemberIndex::NewCopyOf(of) => format!("{of}-new"),
                MemberIndex::Member(i) => i.to_string(),
            };
            let link = report.replication.primary_link.as_ref();
            let primary = primaries
                .get(&shard)
                .and_then(|p| report_of(obs, shard, *p));
            let lag_bytes = primary
                .filter(|p| report.nodes.myself().primary_id.as_ref() == Some(p.node_id()))
                .zip(link)
                .map(|(p, link)| {
                    p.replication
                        .repl_offset
                        .saturating_sub(link.repl_offset)
                        .max(0)
                        .unsigned_abs()
                });
            Some(ReplicaGauges {
                shard,
                member,
                link_up: link.is_some_and(|l| l.link_up),
                lag_bytes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use decide::balance::{Candidate, Domains};
    use valkey::model::{
        MemberIndex, MemberRef, MemberState, NodeReport, ObservedMember, ShardIndex,
    };
    use valkey::parse::{ClusterNodes, PrimaryLink, ReplicationInfo};

    fn zone(z: &str) -> Option<Domains> {
        Some(
            [
                ("zone".to_string(), z.to_string()),
                ("host".to_string(), format!("{z}-node")),
            ]
            .into(),
        )
    }

    /// Shard `shard` with members in `zones` (member i in zones[i]), primary `primary`.
    fn shard(shard: u32, primary: u32, zones: &[&str]) -> ShardView {
        ShardView {
            shard,
            primary: Some(primary),
            members: zones
                .iter()
                .enumerate()
                .map(|(m, z)| Candidate {
                    member: m as u32,
                    domains: zone(z),
                    in_sync: true,
                })
                .collect(),
        }
    }

    fn keys() -> Vec<String> {
        vec!["zone".into(), "host".into()]
    }

    #[test]
    fn primaries_spread_over_zones_are_not_misplaced() {
        let shards = [
            shard(0, 0, &["a", "b", "c"]),
            shard(1, 1, &["a", "b", "c"]),
            shard(2, 2, &["a", "b", "c"]),
        ];
        assert_eq!(primaries_misplaced(&shards, &keys()), 0);
        assert!(balance::best_move(&shards, &keys()).is_none());
    }

    #[test]
    fn every_primary_with_a_better_domain_counts_until_balancing_spreads_them() {
        // All three primaries in zone a: each could move to b or c.
        let mut shards = [
            shard(0, 0, &["a", "b", "c"]),
            shard(1, 0, &["a", "b", "c"]),
            shard(2, 0, &["a", "b", "c"]),
        ];
        assert_eq!(primaries_misplaced(&shards, &keys()), 3);
        // Balancing's moves, one at a time, as it makes them.
        let mut counts = Vec::new();
        while let Some(mv) = balance::best_move(&shards, &keys()) {
            shards[mv.shard as usize].primary = Some(mv.to);
            counts.push(primaries_misplaced(&shards, &keys()));
        }
        assert_eq!(counts, [2, 0]);
    }

    #[test]
    fn only_the_primaries_sharing_a_zone_count() {
        // Zones a, a, b: one of the two in a could move to c; the one in b
        // stays (moving it would not spread them better).
        let shards = [
            shard(0, 0, &["a", "b", "c"]),
            shard(1, 0, &["a", "b", "c"]),
            shard(2, 1, &["a", "b", "c"]),
        ];
        assert_eq!(primaries_misplaced(&shards, &keys()), 2);
    }

    #[test]
    fn a_primary_with_nowhere_better_to_go_is_not_misplaced() {
        // Every member of both shards is in zone a: no move helps.
        let shards = [shard(0, 0, &["a", "a"]), shard(1, 0, &["a", "a"])];
        assert_eq!(primaries_misplaced(&shards, &["zone".to_string()]), 0);
    }

    const PRIMARY: &str = "c1c15d512c42d114ec7d1752ff4fb59311542412";
    const OTHER: &str = "637fce090371c0361bde13cb323f1c70708f3b88";
    const REPLICA: &str = "7f1b152befcb7e611e2e363dc1871561401e9ccd";

    fn member(shard: u32, member: MemberIndex, state: MemberState) -> ObservedMember {
        ObservedMember {
            member: MemberRef {
                shard: ShardIndex(shard),
                member,
            },
            addr: None,
            known_node_id: None,
            former_node_ids: Vec::new(),
            state,
        }
    }

    fn reachable(nodes: &str, replication: ReplicationInfo) -> MemberState {
        MemberState::Reachable(Box::new(NodeReport {
            nodes: ClusterNodes::parse(nodes).unwrap(),
            replication,
            slot_migrations: Vec::new(),
            keys: 0,
            config: BTreeMap::new(),
            cluster_state_ok: true,
            version: None,
            modules: Vec::new(),
        }))
    }

    fn primary_at(offset: i64) -> MemberState {
        reachable(
            &format!("{PRIMARY} 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-16383"),
            ReplicationInfo {
                role: Role::Primary,
                repl_offset: offset,
                connected_replicas: 1,
                replicas: Vec::new(),
                primary_link: None,
            },
        )
    }

    fn replica_of(primary: &str, offset: i64, link_up: bool) -> MemberState {
        reachable(
            &format!(
                "{REPLICA} 10.0.0.2:6379@16379 myself,slave {primary} 0 0 1 connected\n\
                 {primary} 10.0.0.1:6379@16379 master - 0 0 1 connected 0-16383"
            ),
            ReplicationInfo {
                role: Role::Replica,
                repl_offset: offset,
                connected_replicas: 0,
                replicas: Vec::new(),
                primary_link: Some(PrimaryLink {
                    host: "10.0.0.1".into(),
                    port: 6379,
                    link_up,
                    sync_in_progress: false,
                    repl_offset: offset,
                    last_io_seconds_ago: Some(0),
                }),
            },
        )
    }

    #[test]
    fn a_replica_of_the_live_primary_reports_its_lag_in_bytes() {
        let obs = ObservedCluster {
            members: vec![
                member(0, MemberIndex::Member(0), primary_at(1_000)),
                member(0, MemberIndex::Member(1), replica_of(PRIMARY, 400, true)),
                // Asked after the primary: ahead of its answer, no lag.
                member(0, MemberIndex::Member(2), replica_of(PRIMARY, 1_200, true)),
                member(0, MemberIndex::NewCopyOf(1), replica_of(PRIMARY, 0, false)),
                member(
                    0,
                    MemberIndex::Member(3),
                    MemberState::Unreachable {
                        reason: "connection refused".into(),
                    },
                ),
            ],
        };
        let primaries = BTreeMap::from([(0, 0)]);
        let got = replicas(&obs, &primaries);
        let want = [
            ("1", true, Some(600)),
            ("2", true, Some(0)),
            ("1-new", false, Some(1_000)),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, (member, link_up, lag)) in got.iter().zip(want) {
            assert_eq!(
                (g.shard, g.member.as_str(), g.link_up, g.lag_bytes),
                (0, member, link_up, lag)
            );
        }
    }

    #[test]
    fn a_replica_of_another_node_or_of_a_shard_without_primary_has_no_lag() {
        let obs = ObservedCluster {
            members: vec![
                member(0, MemberIndex::Member(0), primary_at(1_000)),
                member(0, MemberIndex::Member(1), replica_of(OTHER, 10, true)),
                member(1, MemberIndex::Member(1), replica_of(PRIMARY, 10, true)),
            ],
        };
        let got = replicas(&obs, &BTreeMap::from([(0, 0)]));
        assert_eq!(got.len(), 2);
        assert!(
            got.iter().all(|g| g.link_up && g.lag_bytes.is_none()),
            "{got:?}"
        );
    }
}
