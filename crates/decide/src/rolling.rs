//! The rolling update: which member to restart next (pure).
//!
//! StatefulSets use `updateStrategy: OnDelete`, so a new image, resources or
//! restart-only setting reaches a pod only when the operator deletes it. One
//! member at a time, and only while the cluster is Ready (every shard served,
//! every replica in sync): replicas first; then, for each shard whose primary
//! is out of date, a graceful CLUSTER FAILOVER to an in-sync replica (the
//! Valkey planner makes it once the target is in sync) and the old primary is
//! restarted as a replica. Between steps the restarted member must be back,
//! Ready and in sync, which the Ready gate above enforces.
//!
//! A member the placement plan moves is not restarted but moved surge-first
//! ([`RollStep::Move`], see [`super::moves`]): its new copy comes up and
//! syncs beside it before it goes, so a move never costs the shard a copy.
//! A moving primary with an in-sync replica hands over to it first, like a
//! restart; a lone primary moves too (its new copy is made the primary once
//! in sync).

use super::placement::Placement;
use crate::facts::{Facts, desired_members};
use crate::memory::Announced;
use crate::notes::{Note, reason};
use crate::pods::{PodFacts, needs_restart};
use api::constants::member_name;
use kube_core::ResourceExt;
use resources::Desired;
use std::collections::BTreeMap;

/// One member as the rolling update sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollMember {
    pub shard: u32,
    pub member: u32,
    /// Its pod exists.
    pub has_pod: bool,
    /// Its pod is being deleted.
    pub terminating: bool,
    /// Its pod runs an out-of-date spec, or stands where the plan no longer
    /// wants it (see `moving`): either way the pod must be re-created.
    pub stale: bool,
    /// The plan puts it on another node (a Preferred constraint can be met
    /// again, a Required one changed): it is moved surge-first (a new copy
    /// where the plan wants it, seeded by its primary, then the old one goes).
    pub moving: bool,
    /// Valkey says it is the primary of its shard.
    pub primary: bool,
    /// Its pod cannot start (an image that cannot be pulled, a crash loop):
    /// it serves nothing, so an out-of-date one is re-created at once,
    /// whatever the rest of the cluster is doing.
    pub stuck: bool,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollStep {
    /// Every pod is up to date.
    Done,
    /// Out-of-date pods remain, but now is not the time; the reason says why.
    Wait(String),
    /// Delete this member's pod (a replica, or a primary with no replica whose
    /// data survives on its volume).
    Restart { shard: u32, member: u32 },
    /// Start moving this member: run its new copy beside it (see
    /// [`super::moves`]).
    Move { shard: u32, member: u32 },
    /// Move the primary of `shard` to `to` first (graceful failover).
    Failover { shard: u32, to: u32 },
    /// A restart would lose data: the shard has no replica and no volume.
    Blocked(String),
}

/// The next step. `cluster_ready`: the Valkey cluster is Ready and every pod
/// Ready. `preference`: per shard, the replicas in the order the operator
/// would promote them. `persistent`: data survives a restart on the volume.
pub fn next_step(
    members: &[RollMember],
    cluster_ready: bool,
    preference: &BTreeMap<u32, Vec<u32>>,
    persistent: bool,
) -> RollStep {
    let stale: Vec<&RollMember> = members.iter().filter(|m| m.stale && m.has_pod).collect();
    if stale.is_empty() {
        return RollStep::Done;
    }
    if let Some(m) = members.iter().find(|m| m.terminating) {
        return RollStep::Wait(format!(
            "shard {} member {} is restarting",
            m.shard, m.member
        ));
    }
    // A member whose pod cannot start serves nothing: re-creating it from
    // the fixed spec costs nothing, and waiting for the cluster to be Ready
    // would wait for ever (it is what keeps it from Ready).
    if let Some(s) = stale.iter().find(|m| m.stuck && !m.moving) {
        return RollStep::Restart {
            shard: s.shard,
            member: s.member,
        };
    }
    if !cluster_ready {
        return RollStep::Wait("waiting for the cluster to be Ready between restarts".into());
    }
    if let Some(r) = stale.iter().find(|m| !m.primary) {
        return if r.moving {
            RollStep::Move {
                shard: r.shard,
                member: r.member,
            }
        } else {
            RollStep::Restart {
                shard: r.shard,
                member: r.member,
            }
        };
    }
    // Only out-of-date primaries are left.
    let p = stale[0];
    let replicas: Vec<u32> = members
        .iter()
        .filter(|m| m.shard == p.shard && !m.primary && m.has_pod && !m.stale)
        .map(|m| m.member)
        .collect();
    if replicas.is_empty() {
        // A lone primary moves by its new copy (which takes over once in
        // sync), and survives a restart only with its volume.
        return if p.moving {
            RollStep::Move {
                shard: p.shard,
                member: p.member,
            }
        } else if persistent {
            RollStep::Restart {
                shard: p.shard,
                member: p.member,
            }
        } else {
            RollStep::Blocked(format!(
                "shard {} has no replica and no persistent volume: restarting its primary would lose its data \
                 (add a replica or persistence)",
                p.shard
            ))
        };
    }
    let order = preference.get(&p.shard).cloned().unwrap_or_default();
    let to = order
        .iter()
        .copied()
        .find(|m| replicas.contains(m))
        .unwrap_or(replicas[0]);
    RollStep::Failover { shard: p.shard, to }
}

/// The rolling step, and how many members are out of date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    pub step: RollStep,
    /// Members to restart for a new spec.
    pub stale: usize,
    /// Members to move to where the plan puts them.
    pub moving: usize,
}

/// Reads every member of the spec as the rolling update sees it, and picks
/// the next step.
pub fn roll(f: &Facts<'_>, desired: &Desired, placement: &Placement, cluster_ready: bool) -> Roll {
    let cluster = f.cluster;
    let members: Vec<RollMember> = desired_members(cluster)
        .map(|(s, m)| {
            let facts = f.kube.members.get(&(s, m)).map(PodFacts::of);
            let name = member_name(&cluster.name, s, m);
            let sts = desired.statefulsets.iter().find(|x| x.name_any() == name);
            let running = facts
                .as_ref()
                .is_some_and(|f| !f.unscheduled() && !f.terminating);
            let restart = match (&facts, sts) {
                (Some(pod), Some(sts)) => {
                    running && (needs_restart(pod, sts) || f.password_stale.contains(&(s, m)))
                }
                _ => false,
            };
            let moving = running && placement.moved(s, m);
            RollMember {
                shard: s,
                member: m,
                has_pod: facts.is_some(),
                terminating: facts.as_ref().is_some_and(|f| f.terminating),
                stale: restart || moving,
                moving,
                primary: f.primaries.get(&s) == Some(&m),
                stuck: facts.as_ref().is_some_and(|f| f.start_failure.is_some()),
            }
        })
        .collect();
    let preference: BTreeMap<u32, Vec<u32>> = (0..cluster.shards)
        .map(|s| {
            (
                s,
                super::balance::failover_preference(&f.shards, s, &f.keys),
            )
        })
        .collect();
    let stale = members.iter().filter(|m| m.stale && !m.moving).count();
    let moving = members.iter().filter(|m| m.moving).count();
    let step = next_step(
        &members,
        cluster_ready,
        &preference,
        resources::config::durable(cluster),
    );
    Roll {
        step,
        stale,
        moving,
    }
}

/// The warning that the rolling update is blocked, unless it was published
/// already for the same reason (`announced` is updated).
pub fn blocked_note(step: &RollStep, announced: &mut Announced) -> Vec<Note> {
    match step {
        RollStep::Blocked(why) if announced.rolling_blocked.as_deref() != Some(why.as_str()) => {
            announced.rolling_blocked = Some(why.clone());
            vec![Note::warning(
                reason::ROLLING_BLOCKED,
                "RollingRestart",
                why.clone(),
            )]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(shard: u32, member: u32, primary: bool, stale: bool) -> RollMember {
        RollMember {
            shard,
            member,
            has_pod: true,
            terminating: false,
            stale,
            moving: false,
            primary,
            stuck: false,
        }
    }

    fn none() -> BTreeMap<u32, Vec<u32>> {
        BTreeMap::new()
    }

    #[test]
    fn an_out_of_date_member_that_cannot_start_is_recreated_even_while_not_ready() {
        let stuck = RollMember {
            stuck: true,
            ..m(0, 1, false, true)
        };
        let ms = [m(0, 0, true, false), stuck.clone()];
        assert_eq!(
            next_step(&ms, false, &none(), false),
            RollStep::Restart {
                shard: 0,
                member: 1
            }
        );
        // Up to date (the spec still names what cannot start): nothing to do.
        let current = RollMember {
            stale: false,
            ..stuck
        };
        assert_eq!(
            next_step(&[m(0, 0, true, false), current], false, &none(), false),
            RollStep::Done
        );
    }

    #[test]
    fn replicas_restart_before_any_primary() {
        let ms = [
            m(0, 0, true, true),
            m(0, 1, false, true),
            m(1, 0, true, true),
            m(1, 1, false, true),
        ];
        assert_eq!(
            next_step(&ms, true, &none(), false),
            RollStep::Restart {
                shard: 0,
                member: 1
            }
        );
    }

    #[test]
    fn an_out_of_date_primary_fails_over_to_an_up_to_date_replica_first() {
        let ms = [
            m(0, 0, true, true),
            m(0, 1, false, false),
            m(0, 2, false, false),
        ];
        let pref = BTreeMap::from([(0, vec![2, 1])]);
        assert_eq!(
            next_step(&ms, true, &pref, false),
            RollStep::Failover { shard: 0, to: 2 }
        );
    }

    #[test]
    fn after_the_failover_the_old_primary_restarts_as_a_replica() {
        let ms = [m(0, 0, false, true), m(0, 1, true, false)];
        assert_eq!(
            next_step(&ms, true, &none(), false),
            RollStep::Restart {
                shard: 0,
                member: 0
            }
        );
    }

    #[test]
    fn nothing_restarts_while_the_cluster_is_not_ready_or_a_member_is_stopping() {
        let ms = [m(0, 0, true, false), m(0, 1, false, true)];
        assert!(matches!(
            next_step(&ms, false, &none(), false),
            RollStep::Wait(_)
        ));
        let mut stopping = ms.clone();
        stopping[0].terminating = true;
        assert!(matches!(
            next_step(&stopping, true, &none(), false),
            RollStep::Wait(_)
        ));
    }

    #[test]
    fn a_lone_primary_restarts_only_when_its_data_is_on_a_volume() {
        let ms = [m(0, 0, true, true)];
        assert_eq!(
            next_step(&ms, true, &none(), true),
            RollStep::Restart {
                shard: 0,
                member: 0
            }
        );
        assert!(matches!(
            next_step(&ms, true, &none(), false),
            RollStep::Blocked(_)
        ));
    }

    #[test]
    fn a_lone_primary_that_must_move_moves_by_its_new_copy_with_or_without_a_volume() {
        let mut p = m(0, 0, true, true);
        p.moving = true;
        for persistent in [false, true] {
            assert_eq!(
                next_step(std::slice::from_ref(&p), true, &none(), persistent),
                RollStep::Move {
                    shard: 0,
                    member: 0
                }
            );
        }
    }

    #[test]
    fn a_moving_replica_is_moved_surge_first_not_restarted() {
        let mut r = m(0, 1, false, true);
        r.moving = true;
        let ms = [m(0, 0, true, false), r];
        assert_eq!(
            next_step(&ms, true, &none(), false),
            RollStep::Move {
                shard: 0,
                member: 1
            }
        );
    }

    #[test]
    fn a_moving_primary_with_a_replica_hands_over_before_it_moves() {
        let mut p = m(0, 0, true, true);
        p.moving = true;
        let ms = [p, m(0, 1, false, false)];
        assert_eq!(
            next_step(&ms, true, &none(), false),
            RollStep::Failover { shard: 0, to: 1 }
        );
    }

    #[test]
    fn no_move_starts_while_the_cluster_is_not_ready() {
        let mut r = m(0, 1, false, true);
        r.moving = true;
        let ms = [m(0, 0, true, false), r];
        assert!(matches!(
            next_step(&ms, false, &none(), false),
            RollStep::Wait(_)
        ));
    }

    #[test]
    fn up_to_date_pods_are_done() {
        let ms = [m(0, 0, true, false), m(0, 1, false, false)];
        assert_eq!(next_step(&ms, false, &none(), false), RollStep::Done);
    }
}
