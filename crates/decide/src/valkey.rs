//! The Valkey topology the operator works towards (pure): the members of the
//! spec with their zones and failover preference, the new copies of moves in
//! flight as extra replicas, and the primaries the rolling update, a move or
//! primary balancing want. `valkey::planner` turns it into the next commands.

use super::balance;
use super::moves::{Move, MoveStep};
use crate::external;
use crate::facts::{Facts, zone_of};
use resources::config;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use valkey::actions::Action as VAction;
use valkey::model::{DesiredCluster, DesiredMember, DesiredShard, MemberIndex, ShardIndex};
use valkey::planner::{self, Health};

/// How long the operator waits for a failover it asked for before asking again.
pub const FAILOVER_PATIENCE: Duration = Duration::from_secs(10);

/// The config a member is told: its zone, when its node has one, and the
/// client address it announces (its external one, or reset to its own: a
/// move's new copy, and every member with external access off).
fn member_config(zone: Option<String>, external: Option<SocketAddr>) -> BTreeMap<String, String> {
    let mut config = external::announce_config(external);
    if let Some(z) = zone {
        config.insert("availability-zone".to_string(), z);
    }
    config
}

/// The members of the spec, with no primary chosen.
pub fn members(f: &Facts<'_>) -> DesiredCluster {
    let live: BTreeMap<String, String> = config::live_config(f.cluster)
        .into_iter()
        .map(|(k, v)| (k, config::normalized_value(&v)))
        .collect();
    let external = external::addresses(f.cluster, f.kube);
    // What each member knows of: a Valkey without the announce settings
    // (before 8.0) is not asked to set them (it would fail every reconcile).
    let known = |s: u32, m: MemberIndex, mut config: BTreeMap<String, String>| {
        let report = f
            .valkey
            .members
            .iter()
            .find(|o| o.member.shard.0 == s && o.member.member == m)
            .and_then(|o| o.report());
        if let Some(r) = report {
            config.retain(|k, _| {
                !external::ANNOUNCE_KEYS.contains(&k.as_str()) || r.config.contains_key(k)
            });
        }
        config
    };
    let shards = (0..f.cluster.shards)
        .map(|s| DesiredShard {
            index: ShardIndex(s),
            members: (0..=f.cluster.replicas)
                .map(|m| DesiredMember {
                    index: MemberIndex::Member(m),
                    config: known(
                        s,
                        MemberIndex::Member(m),
                        member_config(
                            f.kube.members.get(&(s, m)).and_then(|p| zone_of(f.kube, p)),
                            external.get(&(s, m)).copied(),
                        ),
                    ),
                })
                .collect(),
            primary: None,
            failover_preference: balance::failover_preference(&f.shards, s, &f.keys)
                .into_iter()
                .map(MemberIndex::Member)
                .collect(),
            // With external access, a member whose address is not known yet
            // would send clients outside to its pod address.
            hold_slots: f.cluster.external_access.is_some()
                && (0..=f.cluster.replicas).any(|m| !external.contains_key(&(s, m))),
        })
        .collect();
    DesiredCluster {
        shards,
        config: live,
        restore: f
            .cluster
            .restore
            .as_ref()
            .and_then(|r| crate::restore::slot_map(&r.record)),
    }
}

/// `members` plus the new copy of every move in flight as one more replica
/// of its shard (met, attached to the primary, promoted when asked).
pub fn with_new_copies(
    members: &DesiredCluster,
    f: &Facts<'_>,
    moves: &[(Move, MoveStep)],
) -> DesiredCluster {
    let mut out = members.clone();
    for (mv, step) in moves {
        if matches!(step, MoveStep::Abort(_)) {
            continue;
        }
        let Some(pod) = f.kube.new_copies.get(&(mv.shard, mv.member)) else {
            continue;
        };
        if let Some(shard) = out.shards.iter_mut().find(|d| d.index.0 == mv.shard) {
            shard.members.push(DesiredMember {
                index: MemberIndex::NewCopyOf(mv.member),
                config: member_config(zone_of(f.kube, pod), None),
            });
        }
    }
    for (mv, step) in moves {
        if *step == MoveStep::Promote {
            set_primary(&mut out, mv.shard, MemberIndex::NewCopyOf(mv.member));
        }
    }
    out
}

/// Asks for `member` as the primary of `shard`.
pub fn set_primary(d: &mut DesiredCluster, shard: u32, member: MemberIndex) {
    if let Some(s) = d.shards.iter_mut().find(|s| s.index.0 == shard) {
        s.primary = Some(member);
    }
}

/// The health of the members: what the new copies of moves in flight add
/// (observed, but not members) is left out.
pub fn without_new_copies(mut h: Health) -> Health {
    h.issues.retain_mut(|i| match i {
        planner::HealthIssue::LeavingMembers { members } => {
            members.retain(|m| m.member.new_copy_of().is_none());
            !members.is_empty()
        }
        _ => true,
    });
    h
}

/// Drops the failovers asked for less than [`FAILOVER_PATIENCE`] ago: a
/// failover takes a moment, asking again at once would only disturb it.
pub fn patient(
    actions: &mut Vec<VAction>,
    failover_requested: &std::collections::HashMap<u32, Instant>,
    now: Instant,
) {
    actions.retain(|a| match a {
        VAction::Failover { on, .. } => failover_requested
            .get(&on.shard.0)
            .is_none_or(|t| now.duration_since(*t) > FAILOVER_PATIENCE),
        _ => true,
    });
}
