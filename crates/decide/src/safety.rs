//! The rules that keep data when the operator removes something (pure).
//!
//! Three paths can end a copy of a shard's data: healing a member whose node
//! is lost, giving up a move whose new copy cannot come up, and scaling in.
//! They share these rules, so a volume is given up, or a member removed, on
//! the same evidence everywhere:
//!
//! - [`give_up_volume`]: a copy's volume (PVC) is deleted only when the copy
//!   never joined the cluster, or when it serves no slots, another member on a
//!   healthy node serves the shard, and its node has been lost for the longer
//!   of [`NODE_LOST_GRACE`] and `persistence.nodeLossGraceSeconds`. A deleted
//!   Node object counts from when the operator first saw it gone, never as
//!   "lost forever" at once.
//! - [`may_remove_leaving`]: a member the spec no longer has is removed when
//!   the Valkey planner says it is safe (its slots moved, nobody follows it),
//!   or when it never joined the cluster and its pod never ran.

pub use crate::facts::NODE_LOST_GRACE;
use std::time::Duration;

/// One copy of a shard's data (a member, or the new copy of a move), as the
/// volume rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyFacts {
    /// Its pod was bound to a node, or the operator recorded a node id for
    /// it: it may have synced data. A copy that never joined holds nothing.
    pub ever_joined: bool,
    /// How long its node has been lost (NotReady, or the Node object gone);
    /// `None` while its node is Ready.
    pub node_lost_for: Option<Duration>,
    /// Valkey says it serves slots (it is, or last was, the shard's primary).
    pub serves_slots: bool,
    /// Another member, on a node that is not lost, answers as the shard's
    /// primary serving its slots.
    pub shard_served_elsewhere: bool,
}

/// Whether the copy's volume may be deleted; `Err` says why not.
pub fn give_up_volume(c: &CopyFacts, volume_grace: Duration) -> Result<(), String> {
    if !c.ever_joined {
        return Ok(());
    }
    if c.serves_slots {
        return Err("it serves the shard's slots".into());
    }
    if !c.shard_served_elsewhere {
        return Err("it may hold the shard's last copy of data".into());
    }
    let Some(lost_for) = c.node_lost_for else {
        return Err("its node is not lost".into());
    };
    let grace = volume_grace.max(NODE_LOST_GRACE);
    if lost_for < grace {
        return Err(format!(
            "its volume is on a lost node; given up after {} s (persistence.nodeLossGraceSeconds)",
            grace.as_secs()
        ));
    }
    Ok(())
}

/// Whether a member the spec no longer has may be removed (its StatefulSet
/// deleted, and with `reclaimPolicy: Delete` its volume).
///
/// `planner_removable`: the Valkey planner found it holds no slots and no
/// desired member follows it. Otherwise only a member that never joined the
/// cluster (no node id was ever recorded for it) and whose pod never ran goes:
/// a Pending or missing pod of a member that once joined may still own slots
/// or hold the only copy of its volume.
pub fn may_remove_leaving(planner_removable: bool, ever_joined: bool, pod_ran: bool) -> bool {
    planner_removable || (!ever_joined && !pod_ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(lost_secs: Option<u64>) -> CopyFacts {
        CopyFacts {
            ever_joined: true,
            node_lost_for: lost_secs.map(Duration::from_secs),
            serves_slots: false,
            shard_served_elsewhere: true,
        }
    }

    const GRACE: Duration = Duration::from_secs(300);

    #[test]
    fn a_volume_is_given_up_only_after_the_longer_of_both_graces() {
        assert!(give_up_volume(&copy(Some(21)), GRACE).is_err());
        assert!(give_up_volume(&copy(Some(299)), GRACE).is_err());
        assert_eq!(give_up_volume(&copy(Some(300)), GRACE), Ok(()));
        // A zero nodeLossGraceSeconds still waits out a NotReady blip.
        assert!(give_up_volume(&copy(Some(5)), Duration::ZERO).is_err());
        assert_eq!(give_up_volume(&copy(Some(20)), Duration::ZERO), Ok(()));
    }

    #[test]
    fn a_volume_on_a_healthy_node_is_never_given_up() {
        let err = give_up_volume(&copy(None), Duration::ZERO).unwrap_err();
        assert!(err.contains("not lost"), "{err}");
    }

    #[test]
    fn a_copy_that_serves_slots_keeps_its_volume_however_long_its_node_is_lost() {
        // The aborted move's new copy that was already promoted.
        let promoted = CopyFacts {
            serves_slots: true,
            ..copy(Some(86_400))
        };
        let err = give_up_volume(&promoted, GRACE).unwrap_err();
        assert!(err.contains("serves"), "{err}");
    }

    #[test]
    fn a_copy_that_may_hold_the_last_data_keeps_its_volume() {
        let alone = CopyFacts {
            shard_served_elsewhere: false,
            ..copy(Some(86_400))
        };
        let err = give_up_volume(&alone, GRACE).unwrap_err();
        assert!(err.contains("last copy"), "{err}");
    }

    #[test]
    fn a_copy_that_never_joined_holds_nothing_to_keep() {
        let pending = CopyFacts {
            ever_joined: false,
            ..CopyFacts::default()
        };
        assert_eq!(give_up_volume(&pending, GRACE), Ok(()));
    }

    #[test]
    fn a_leaving_member_that_once_joined_waits_for_the_planner_even_when_its_pod_is_pending() {
        assert!(!may_remove_leaving(false, true, false));
        assert!(may_remove_leaving(true, true, true));
        // Never joined, never ran: nothing to lose.
        assert!(may_remove_leaving(false, false, false));
        // Never recorded but its pod runs: the planner decides.
        assert!(!may_remove_leaving(false, false, true));
    }
}
