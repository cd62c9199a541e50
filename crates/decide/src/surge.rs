//! Moving a member surge-first (pure): the new copy first, in sync, then the
//! old one goes, so a shard never has fewer in-sync copies than before.
//!
//! A member is one StatefulSet that normally runs one pod, `<sts>-<k>`
//! (`ordinals.start: k`). When the placement plan puts a running member on
//! another node (a Preferred constraint can be met again), the rolling update
//! starts a move ([`super::rolling::RollStep::Surge`]):
//!
//! 1. the StatefulSet becomes `{start: k, replicas: 2}`. Its template already
//!    carries the new placement and it updates `OnDelete`, so the old pod
//!    keeps running and pod `<sts>-<k+1>` is created where the plan wants it
//!    (with its own new volume when persistence is on);
//! 2. the Valkey planner sees the new copy as one more desired replica of the
//!    shard (index [`valkey::model::MemberIndex::NewCopyOf`]): MEET, then
//!    CLUSTER REPLICATE to the shard's primary;
//! 3. once it is an in-sync replica ([`SurgeStep::Complete`]) the StatefulSet
//!    becomes `{start: k+1, replicas: 1}`: the StatefulSet controller removes
//!    the old pod, the operator deletes the old volume, and the old node id
//!    is forgotten (the member now reports the new one). If the old copy is
//!    the shard's primary at that point, the new copy is made the primary
//!    first by a graceful failover ([`SurgeStep::Promote`]);
//! 4. a move whose new copy cannot come up is given up
//!    ([`SurgeStep::Abort`]: back to `{start: k, replicas: 1}`): its node is
//!    lost, or the plan no longer wants the member moved while the new copy
//!    is still Pending.
//!
//! Nothing here is remembered between reconciles: `k` and the replica count
//! are read back from the live StatefulSet, which pod is which from its
//! `apps.kubernetes.io/pod-index` label ([`Slot`]), so an operator restarted
//! mid-move picks it up where it stands. One move at a time in a cluster:
//! the rolling update starts none while a surge or an old copy remains.

pub use crate::view::{Slot, slot};
use resources::statefulset::Ordinals;

/// The new copy's pod, as the move sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurgePod {
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
pub struct Surge {
    pub shard: u32,
    pub member: u32,
    /// The live StatefulSet's.
    pub ordinals: Ordinals,
    /// The new copy's pod; `None` until the StatefulSet controller creates it.
    pub pod: Option<SurgePod>,
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

impl Surge {
    /// The member moving, for messages: `shard s member m`.
    pub fn what(&self) -> String {
        format!("shard {} member {}", self.shard, self.member)
    }
}

/// What to do about a move in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SurgeStep {
    /// Not yet; the reason says what the move waits for (without the
    /// member, see [`Surge::what`]).
    Wait(String),
    /// The old copy is the primary and the new copy is in sync: fail over to
    /// the new copy (graceful, the planner sends it).
    Promote,
    /// The new copy is in sync and not the old copy's replica-to-be: keep only
    /// the new copy (`{start: k+1, replicas: 1}`).
    Complete,
    /// Give the move up (`{start: k, replicas: 1}`); the reason says why
    /// (without the member, see [`Surge::what`]).
    Abort(String),
}

/// The next step of move `s`.
pub fn next(s: &Surge) -> SurgeStep {
    let Some(pod) = &s.pod else {
        return if s.still_wanted {
            SurgeStep::Wait("waiting for its new copy to be created".to_string())
        } else {
            SurgeStep::Abort(
                "the placement plan no longer moves it and its new copy was not created"
                    .to_string(),
            )
        };
    };
    if pod.terminating {
        return SurgeStep::Wait("its new copy is being deleted".to_string());
    }
    // A new copy that serves the shard's slots is never given up, even on a
    // lost node: Valkey fails the shard over first, then the move can end.
    if pod.primary && pod.node_lost {
        return SurgeStep::Wait(
            "its new copy is the shard's primary on a lost node; waiting for a failover"
                .to_string(),
        );
    }
    if pod.node_lost {
        return SurgeStep::Abort("the node of its new copy is lost".to_string());
    }
    if !pod.scheduled {
        return if s.still_wanted {
            SurgeStep::Wait("its new copy is Pending".to_string())
        } else {
            SurgeStep::Abort(
                "the placement plan no longer moves it and its new copy is still Pending"
                    .to_string(),
            )
        };
    }
    if pod.primary {
        // Failed over to it (by the operator, or by Valkey itself): the old
        // copy is a replica now, or about to be.
        return if s.old_is_primary {
            SurgeStep::Wait("waiting for the failover to its new copy".to_string())
        } else {
            SurgeStep::Complete
        };
    }
    if !pod.in_sync {
        return SurgeStep::Wait("its new copy is syncing from the shard's primary".to_string());
    }
    if s.old_is_primary {
        return SurgeStep::Promote;
    }
    SurgeStep::Complete
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: u32, replicas: u32) -> Ordinals {
        Ordinals { start, replicas }
    }

    fn synced() -> SurgePod {
        SurgePod {
            scheduled: true,
            in_sync: true,
            ..Default::default()
        }
    }

    fn surge(pod: Option<SurgePod>) -> Surge {
        Surge {
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
        assert_eq!(slot(moving, 5), Slot::Surge);
        assert_eq!(slot(moving, 6), Slot::Condemned);
    }

    #[test]
    fn a_move_adds_the_next_ordinal_then_drops_the_old_one() {
        let k = at(3, 1);
        let surging = k.with_surge();
        assert_eq!(surging, at(3, 2));
        assert_eq!(surging.surge(), Some(4));
        assert_eq!(surging.completed(), at(4, 1));
        assert_eq!(surging.aborted(), k);
        assert_eq!(k.surge(), None);
    }

    #[test]
    fn the_old_copy_stays_until_the_new_one_is_in_sync() {
        assert!(matches!(next(&surge(None)), SurgeStep::Wait(_)));
        let pending = SurgePod::default();
        assert!(matches!(next(&surge(Some(pending))), SurgeStep::Wait(_)));
        let syncing = SurgePod {
            scheduled: true,
            ..Default::default()
        };
        assert!(matches!(next(&surge(Some(syncing))), SurgeStep::Wait(w) if w.contains("syncing")));
        assert_eq!(next(&surge(Some(synced()))), SurgeStep::Complete);
    }

    #[test]
    fn a_primary_hands_over_to_its_in_sync_new_copy_before_it_goes() {
        let mut s = surge(Some(synced()));
        s.old_is_primary = true;
        assert_eq!(next(&s), SurgeStep::Promote);
        // Promoted, but the old copy has not stepped down yet.
        let mut promoted = s.clone();
        if let Some(p) = promoted.pod.as_mut() {
            p.primary = true;
        }
        assert!(matches!(next(&promoted), SurgeStep::Wait(_)));
        promoted.old_is_primary = false;
        assert_eq!(next(&promoted), SurgeStep::Complete);
    }

    #[test]
    fn a_primary_never_hands_over_to_a_new_copy_that_is_behind() {
        let mut s = surge(Some(SurgePod {
            scheduled: true,
            ..Default::default()
        }));
        s.old_is_primary = true;
        assert!(matches!(next(&s), SurgeStep::Wait(_)));
    }

    #[test]
    fn a_move_is_given_up_when_its_new_copy_cannot_come_up() {
        let lost = SurgePod {
            scheduled: true,
            node_lost: true,
            ..Default::default()
        };
        assert!(matches!(next(&surge(Some(lost))), SurgeStep::Abort(_)));
        let mut unwanted = surge(Some(SurgePod::default()));
        unwanted.still_wanted = false;
        assert!(matches!(next(&unwanted), SurgeStep::Abort(_)));
        let mut not_created = surge(None);
        not_created.still_wanted = false;
        assert!(matches!(next(&not_created), SurgeStep::Abort(_)));
    }

    #[test]
    fn a_promoted_new_copy_on_a_lost_node_is_never_given_up() {
        let promoted_then_lost = SurgePod {
            scheduled: true,
            in_sync: true,
            primary: true,
            node_lost: true,
            ..Default::default()
        };
        let s = surge(Some(promoted_then_lost));
        assert!(matches!(next(&s), SurgeStep::Wait(w) if w.contains("failover")));
    }

    #[test]
    fn a_bound_new_copy_is_kept_even_when_the_plan_changes_its_mind() {
        // Once bound, the plan counts the member where the new copy runs;
        // finishing the move is never worse than giving it up.
        let mut s = surge(Some(synced()));
        s.still_wanted = false;
        assert_eq!(next(&s), SurgeStep::Complete);
    }
}
