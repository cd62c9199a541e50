//! Moves (pure): a member moves surge-first, its new copy first, in sync,
//! then the old one goes, so a shard never has fewer in-sync copies than
//! before. The moves in flight are read again every reconcile from the
//! facts: which member StatefulSets run a second pod, each move's next step
//! ([`next`]), and how they show in the status.
//!
//! A member is one StatefulSet that normally runs one pod, `<sts>-<k>`
//! (`ordinals.start: k`). When the placement plan puts a running member on
//! another node (a Preferred constraint can be met again), the rolling update
//! starts a move ([`super::rolling::RollStep::Move`]):
//!
//! 1. the StatefulSet becomes `{start: k, replicas: 2}`. Its template already
//!    carries the new placement and it updates `OnDelete`, so the old pod
//!    keeps running and pod `<sts>-<k+1>` is created where the plan wants it
//!    (with its own new volume when persistence is on);
//! 2. the Valkey planner sees the new copy as one more desired replica of the
//!    shard (index [`valkey::model::MemberIndex::NewCopyOf`]): MEET, then
//!    CLUSTER REPLICATE to the shard's primary;
//! 3. once it is an in-sync replica ([`MoveStep::Complete`]) the StatefulSet
//!    becomes `{start: k+1, replicas: 1}`: the StatefulSet controller removes
//!    the old pod, the operator deletes the old volume, and the old node id
//!    is forgotten (the member now reports the new one). If the old copy is
//!    the shard's primary at that point, the new copy is made the primary
//!    first by a graceful failover ([`MoveStep::Promote`]);
//! 4. a move whose new copy cannot come up is given up
//!    ([`MoveStep::Abort`]: back to `{start: k, replicas: 1}`): its node is
//!    lost, or the plan no longer wants the member moved while the new copy
//!    is still Pending.
//!
//! Nothing here is remembered between reconciles: `k` and the replica count
//! are read back from the live StatefulSet, which pod is which from its
//! `apps.kubernetes.io/pod-index` label ([`Slot`]), so an operator restarted
//! mid-move picks it up where it stands. One move at a time in a cluster:
//! the rolling update starts none while a new copy or an old copy remains.

use super::placement::Placement;
use super::safety;
use crate::facts::{Facts, desired_members, node_of, serves_slots};
use crate::placement::SpreadState;
use crate::pods::PodFacts;
use crate::view::KubeView;
pub use crate::view::{Slot, slot};
use api::constants::member_name;
use kube_core::ResourceExt;
use resources::statefulset::Ordinals;
use std::collections::BTreeSet;
use valkey::model::MemberIndex;

/// The new copy's pod, as the move sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewCopy {
    /// Bound to a node.
    pub scheduled: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Its node is lost (NotReady past the grace, or gone).
    pub node_lost: bool,
    /// It follows the shard's live primary and is in sync with it.
    pub in_sync: bool,
    /// Valkey says it is the shard's primary (it was failed over to).
    pub primary: bool,
}

/// A move in flight: the member's StatefulSet runs (or is about to run) a
/// second pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub shard: u32,
    pub member: u32,
    /// The live StatefulSet's.
    pub ordinals: Ordinals,
    /// The new copy's pod; `None` until the StatefulSet controller creates it.
    pub pod: Option<NewCopy>,
    /// The old copy is Valkey's primary of the shard.
    pub old_is_primary: bool,
    /// A member other than the new copy, on a node that is not lost, is the
    /// shard's live primary.
    pub served_elsewhere: bool,
    /// The placement plan still puts the member elsewhere than its old copy
    /// (only read while the new copy is not bound: once it is, the plan
    /// counts the member where the new copy runs).
    pub still_wanted: bool,
}

impl Move {
    /// The member moving, for messages: `shard s member m`.
    pub fn what(&self) -> String {
        format!("shard {} member {}", self.shard, self.member)
    }
}

/// What to do about a move in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveStep {
    /// Not yet; the reason says what the move waits for (without the
    /// member, see [`Move::what`]).
    Wait(String),
    /// The old copy is the primary and the new copy is in sync: fail over to
    /// the new copy (graceful, the planner sends it).
    Promote,
    /// The new copy is in sync and not the old copy's replica-to-be: keep only
    /// the new copy (`{start: k+1, replicas: 1}`).
    Complete,
    /// Give the move up (`{start: k, replicas: 1}`); the reason says why
    /// (without the member, see [`Move::what`]).
    Abort(String),
}

/// The next step of move `s`.
pub fn next(s: &Move) -> MoveStep {
    let Some(pod) = &s.pod else {
        return if s.still_wanted {
            MoveStep::Wait("waiting for its new copy to be created".to_string())
        } else {
            MoveStep::Abort(
                "the placement plan no longer moves it and its new copy was not created"
                    .to_string(),
            )
        };
    };
    if pod.terminating {
        return MoveStep::Wait("its new copy is being deleted".to_string());
    }
    // A new copy that serves the shard's slots is never given up, even on a
    // lost node: Valkey fails the shard over first, then the move can end.
    if pod.primary && pod.node_lost {
        return MoveStep::Wait(
            "its new copy is the shard's primary on a lost node; waiting for a failover"
                .to_string(),
        );
    }
    if pod.node_lost {
        return MoveStep::Abort("the node of its new copy is lost".to_string());
    }
    if !pod.scheduled {
        return if s.still_wanted {
            MoveStep::Wait("its new copy is Pending".to_string())
        } else {
            MoveStep::Abort(
                "the placement plan no longer moves it and its new copy is still Pending"
                    .to_string(),
            )
        };
    }
    if pod.primary {
        // Failed over to it (by the operator, or by Valkey itself): the old
        // copy is a replica now, or about to be.
        return if s.old_is_primary {
            MoveStep::Wait("waiting for the failover to its new copy".to_string())
        } else {
            MoveStep::Complete
        };
    }
    if !pod.in_sync {
        return MoveStep::Wait("its new copy is syncing from the shard's primary".to_string());
    }
    if s.old_is_primary {
        return MoveStep::Promote;
    }
    MoveStep::Complete
}

/// Every move in flight (a member's StatefulSet runs a second pod), with its
/// next step.
pub fn in_flight(f: &Facts<'_>, placement: &Placement) -> Vec<(Move, MoveStep)> {
    let mut out = Vec::new();
    for (s, m) in desired_members(f.cluster) {
        let Some(sts) = f.kube.statefulsets.get(&member_name(&f.cluster.name, s, m)) else {
            continue;
        };
        let ordinals = Ordinals::of(sts);
        if ordinals.new_copy().is_none() {
            continue;
        }
        let copy = MemberIndex::NewCopyOf(m);
        let pod = f.kube.new_copies.get(&(s, m)).map(|p| {
            let facts = PodFacts::of(p);
            NewCopy {
                scheduled: !facts.unscheduled(),
                terminating: facts.terminating,
                node_lost: f.on_lost_node(&facts),
                in_sync: f.in_sync_at(s, copy),
                primary: f.report_at(s, copy).is_some_and(serves_slots),
            }
        });
        let mv = Move {
            shard: s,
            member: m,
            ordinals,
            pod,
            old_is_primary: f.primaries.get(&s) == Some(&m),
            served_elsewhere: f.served_elsewhere(s, copy),
            still_wanted: placement.moved(s, m),
        };
        let step = next(&mv);
        out.push((mv, step));
    }
    out
}

/// Why no other move or restart may start now, if one is under way.
pub fn move_in_flight(moves: &[(Move, MoveStep)], view: &KubeView) -> Option<String> {
    if let Some((s, step)) = moves.first() {
        let detail = match step {
            MoveStep::Wait(w) | MoveStep::Abort(w) => w.clone(),
            MoveStep::Promote => "handing the primary over to its new copy".to_string(),
            MoveStep::Complete => "its new copy is in sync, the old one goes".to_string(),
        };
        return Some(format!("a member is moving ({}: {detail})", s.what()));
    }
    view.condemned.first().map(|((s, m), pod)| {
        format!(
            "a member is moving (shard {s} member {m}: its old copy, pod {}, is going)",
            pod.name_any()
        )
    })
}

/// One line per member the plan moves or that is moving, for the status.
pub fn move_lines(f: &Facts<'_>, placement: &Placement, moves: &[(Move, MoveStep)]) -> Vec<String> {
    let view = f.kube;
    let mut lines = Vec::new();
    let mut busy: BTreeSet<(u32, u32)> = BTreeSet::new();
    for (mv, step) in moves {
        let key = (mv.shard, mv.member);
        busy.insert(key);
        let state = match step {
            MoveStep::Wait(w) => w.clone(),
            MoveStep::Promote => "handing the primary over to its new copy".to_string(),
            MoveStep::Complete => "its new copy is in sync".to_string(),
            MoveStep::Abort(_) => "giving the move up".to_string(),
        };
        lines.push(format!(
            "shard {} member {}: moving from node {} to {} ({state})",
            mv.shard,
            mv.member,
            node_of(view.members.get(&key)),
            match view.new_copies.get(&key).and_then(|p| PodFacts::of(p).node) {
                Some(n) => format!("node {n}"),
                None => "where the plan puts it".to_string(),
            }
        ));
    }
    for ((s, m), pod) in &view.condemned {
        if busy.insert((*s, *m)) {
            lines.push(format!(
                "shard {s} member {m}: its old copy (pod {} on node {}) is going",
                pod.name_any(),
                node_of(Some(pod))
            ));
        }
    }
    for (s, m) in desired_members(f.cluster) {
        let running = view
            .members
            .get(&(s, m))
            .is_some_and(|p| !PodFacts::of(p).unscheduled());
        if running && placement.moved(s, m) && !busy.contains(&(s, m)) {
            lines.push(format!(
                "shard {s} member {m}: on node {}, the plan puts it on node {}",
                node_of(view.members.get(&(s, m))),
                placement.node_of(s, m)
            ));
        }
    }
    lines
}

/// The TopologySpread state: the plan's, but not "met" while members still
/// have to get there.
pub fn spread_now(placement: &Placement, moves: &[String]) -> SpreadState {
    match placement.spread_state() {
        SpreadState::Met if !moves.is_empty() => SpreadState::Moving(moves.to_vec()),
        other => other,
    }
}

/// Why giving up move `mv` must wait, if it must: the new copy's volume
/// goes with the move, by the one volume rule ([`safety::give_up_volume`]).
pub fn keeps_new_copy_volume(f: &Facts<'_>, mv: &Move) -> Option<String> {
    let pod = f.kube.new_copies.get(&(mv.shard, mv.member))?;
    let p = f.cluster.persistence.as_ref()?;
    let facts = PodFacts::of(pod);
    let copy = safety::CopyFacts {
        ever_joined: !facts.unscheduled(),
        node_lost_for: facts.node.as_deref().and_then(|n| f.node_lost_for(n)),
        serves_slots: mv.pod.as_ref().is_some_and(|p| p.primary),
        shard_served_elsewhere: mv.served_elsewhere,
    };
    safety::give_up_volume(&copy, p.node_loss_grace).err()
}

/// How a move is given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    /// Giving up waits: the new copy's volume is kept, for this reason.
    pub waits: Option<String>,
    /// The new copy is on a lost node: nobody there can finish its
    /// deletion, so it is force-deleted.
    pub force_delete_new: bool,
}

/// How each move of `moves` that is given up goes, by member.
pub fn giving_up(
    f: &Facts<'_>,
    moves: &[(Move, MoveStep)],
) -> std::collections::BTreeMap<(u32, u32), GiveUp> {
    moves
        .iter()
        .filter(|(_, step)| matches!(step, MoveStep::Abort(_)))
        .map(|(mv, _)| {
            let new = f.kube.new_copies.get(&(mv.shard, mv.member));
            let give_up = GiveUp {
                waits: keeps_new_copy_volume(f, mv),
                force_delete_new: new.is_some_and(|p| f.on_lost_node(&PodFacts::of(p))),
            };
            ((mv.shard, mv.member), give_up)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: u32, replicas: u32) -> Ordinals {
        Ordinals { start, replicas }
    }

    fn synced() -> NewCopy {
        NewCopy {
            scheduled: true,
            in_sync: true,
            ..Default::default()
        }
    }

    fn a_move(pod: Option<NewCopy>) -> Move {
        Move {
            shard: 1,
            member: 2,
            ordinals: at(3, 2),
            pod,
            old_is_primary: false,
            served_elsewhere: true,
            still_wanted: true,
        }
    }

    #[test]
    fn pods_are_told_apart_by_ordinal_not_by_name() {
        let steady = at(4, 1);
        assert_eq!(slot(steady, 4), Slot::Member);
        assert_eq!(slot(steady, 3), Slot::Condemned);
        assert_eq!(slot(steady, 5), Slot::Condemned);
        let moving = at(4, 2);
        assert_eq!(slot(moving, 4), Slot::Member);
        assert_eq!(slot(moving, 5), Slot::NewCopy);
        assert_eq!(slot(moving, 6), Slot::Condemned);
    }

    #[test]
    fn a_move_adds_the_next_ordinal_then_drops_the_old_one() {
        let k = at(3, 1);
        let surging = k.with_new_copy();
        assert_eq!(surging, at(3, 2));
        assert_eq!(surging.new_copy(), Some(4));
        assert_eq!(surging.completed(), at(4, 1));
        assert_eq!(surging.aborted(), k);
        assert_eq!(k.new_copy(), None);
    }

    #[test]
    fn the_old_copy_stays_until_the_new_one_is_in_sync() {
        assert!(matches!(next(&a_move(None)), MoveStep::Wait(_)));
        let pending = NewCopy::default();
        assert!(matches!(next(&a_move(Some(pending))), MoveStep::Wait(_)));
        let syncing = NewCopy {
            scheduled: true,
            ..Default::default()
        };
        assert!(matches!(next(&a_move(Some(syncing))), MoveStep::Wait(w) if w.contains("syncing")));
        assert_eq!(next(&a_move(Some(synced()))), MoveStep::Complete);
    }

    #[test]
    fn a_primary_hands_over_to_its_in_sync_new_copy_before_it_goes() {
        let mut s = a_move(Some(synced()));
        s.old_is_primary = true;
        assert_eq!(next(&s), MoveStep::Promote);
        // Promoted, but the old copy has not stepped down yet.
        let mut promoted = s.clone();
        if let Some(p) = promoted.pod.as_mut() {
            p.primary = true;
        }
        assert!(matches!(next(&promoted), MoveStep::Wait(_)));
        promoted.old_is_primary = false;
        assert_eq!(next(&promoted), MoveStep::Complete);
    }

    #[test]
    fn a_primary_never_hands_over_to_a_new_copy_that_is_behind() {
        let mut s = a_move(Some(NewCopy {
            scheduled: true,
            ..Default::default()
        }));
        s.old_is_primary = true;
        assert!(matches!(next(&s), MoveStep::Wait(_)));
    }

    #[test]
    fn a_move_is_given_up_when_its_new_copy_cannot_come_up() {
        let lost = NewCopy {
            scheduled: true,
            node_lost: true,
            ..Default::default()
        };
        assert!(matches!(next(&a_move(Some(lost))), MoveStep::Abort(_)));
        let mut unwanted = a_move(Some(NewCopy::default()));
        unwanted.still_wanted = false;
        assert!(matches!(next(&unwanted), MoveStep::Abort(_)));
        let mut not_created = a_move(None);
        not_created.still_wanted = false;
        assert!(matches!(next(&not_created), MoveStep::Abort(_)));
    }

    #[test]
    fn a_promoted_new_copy_on_a_lost_node_is_never_given_up() {
        let promoted_then_lost = NewCopy {
            scheduled: true,
            in_sync: true,
            primary: true,
            node_lost: true,
            ..Default::default()
        };
        let s = a_move(Some(promoted_then_lost));
        assert!(matches!(next(&s), MoveStep::Wait(w) if w.contains("failover")));
    }

    #[test]
    fn a_bound_new_copy_is_kept_even_when_the_plan_changes_its_mind() {
        // Once bound, the plan counts the member where the new copy runs;
        // finishing the move is never worse than giving it up.
        let mut s = a_move(Some(synced()));
        s.still_wanted = false;
        assert_eq!(next(&s), MoveStep::Complete);
    }
}
