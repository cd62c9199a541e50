//! Healing after node loss (pure): when a member's node is gone, the pod
//! object stays behind (Terminating, or Running on a node nobody hears from)
//! and its StatefulSet cannot re-create it. The operator removes it so the
//! member comes back where the plan now puts it.
//!
//! - A node is *lost* when its Ready condition has not been True, or its Node
//!   object has been gone, for [`NODE_LOST_GRACE`] (Valkey has long failed
//!   over by then: the cluster-node-timeout is 5 s; the grace keeps a blip
//!   from moving members).
//! - Without persistence the pod is force-deleted, but only while another
//!   member of the shard answers as its primary: if the lost member may hold
//!   the shard's last copy, it is better to wait for the node to return
//!   (a partitioned process keeps its data) than to make the loss final.
//! - With persistence the member's volume lives on the lost node. It is given
//!   up (PVC deleted, then the pod force-deleted) by the one volume rule,
//!   [`super::safety::give_up_volume`]: after `persistence.nodeLossGraceSeconds`,
//!   and never while the volume may hold the shard's last copy.

use super::safety::{self, CopyFacts};
use crate::facts::{Facts, desired_members};
use crate::memory::Announced;
use crate::notes::{Note, reason};
use crate::pods::PodFacts;
use std::time::Duration;
use valkey::model::MemberIndex;

pub use super::safety::NODE_LOST_GRACE;

/// One member whose pod sits on a lost node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostMember {
    pub shard: u32,
    pub member: u32,
    /// How long its node has been lost (NotReady, or the Node object gone).
    pub lost_for: Duration,
    /// Another member of the shard answers as the primary serving its slots.
    pub shard_served_elsewhere: bool,
}

/// What to do about a lost member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heal {
    /// Force-delete the pod (its StatefulSet re-creates it).
    ReplacePod { shard: u32, member: u32 },
    /// Delete the PVC, then force-delete the pod: the member starts over
    /// elsewhere with a new volume and is reseeded by its primary.
    ReplacePodAndVolume { shard: u32, member: u32 },
    /// Not yet; the reason says why.
    Wait {
        shard: u32,
        member: u32,
        reason: String,
    },
}

/// The decision for each lost member.
pub fn decide(lost: &[LostMember], persistent: bool, volume_grace: Duration) -> Vec<Heal> {
    lost.iter()
        .map(|l| {
            let (shard, member) = (l.shard, l.member);
            let lost_for = l.lost_for;
            if lost_for < NODE_LOST_GRACE {
                return Heal::Wait {
                    shard,
                    member,
                    reason: format!(
                        "its node is NotReady or gone; waiting {} s before re-creating it elsewhere",
                        NODE_LOST_GRACE.as_secs()
                    ),
                };
            }
            if !l.shard_served_elsewhere {
                return Heal::Wait {
                    shard,
                    member,
                    reason: "it may hold the shard's last copy of data: waiting for its node to return".into(),
                };
            }
            if !persistent {
                return Heal::ReplacePod { shard, member };
            }
            let copy = CopyFacts {
                ever_joined: true,
                node_lost_for: Some(lost_for),
                serves_slots: false,
                shard_served_elsewhere: l.shard_served_elsewhere,
            };
            if let Err(reason) = safety::give_up_volume(&copy, volume_grace) {
                return Heal::Wait {
                    shard,
                    member,
                    reason,
                };
            }
            Heal::ReplacePodAndVolume { shard, member }
        })
        .collect()
}

/// The members of the spec whose pod sits on a node that is not Ready (or
/// gone), however briefly: [`decide`] says what to do about each.
pub fn lost_members(f: &Facts<'_>) -> Vec<LostMember> {
    desired_members(f.cluster)
        .filter_map(|(s, m)| {
            let node = PodFacts::of(f.kube.members.get(&(s, m))?).node?;
            let lost_for = f.node_lost_for(&node)?;
            Some(LostMember {
                shard: s,
                member: m,
                lost_for,
                shard_served_elsewhere: f.served_elsewhere(s, MemberIndex::Member(m)),
            })
        })
        .collect()
}

/// The warning about lost members that must wait, unless it was published
/// already (`announced` is updated; cleared once no member is lost).
pub fn waiting_note(heals: &[Heal], announced: &mut Announced) -> Vec<Note> {
    if heals.is_empty() {
        announced.heal_waiting = None;
        return Vec::new();
    }
    let waiting: Vec<String> = heals
        .iter()
        .filter_map(|h| match h {
            Heal::Wait {
                shard,
                member,
                reason,
            } => Some(format!("shard {shard} member {member}: {reason}")),
            _ => None,
        })
        .collect();
    let text = waiting.join("; ");
    if waiting.is_empty() || announced.heal_waiting.as_deref() == Some(text.as_str()) {
        return Vec::new();
    }
    announced.heal_waiting = Some(text.clone());
    vec![Note::warning(reason::MEMBER_LOST, "Heal", text)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(secs: Option<u64>, served: bool) -> LostMember {
        LostMember {
            shard: 1,
            member: 2,
            // `None`: a Node object gone for a day.
            lost_for: Duration::from_secs(secs.unwrap_or(86_400)),
            shard_served_elsewhere: served,
        }
    }

    #[test]
    fn a_brief_not_ready_moves_nothing() {
        assert!(matches!(
            decide(&[lost(Some(5), true)], false, Duration::ZERO)[0],
            Heal::Wait { .. }
        ));
    }

    #[test]
    fn a_lost_member_without_a_volume_is_re_created_when_its_shard_is_served() {
        assert_eq!(
            decide(&[lost(Some(30), true)], false, Duration::from_secs(300)),
            vec![Heal::ReplacePod {
                shard: 1,
                member: 2
            }]
        );
        assert_eq!(
            decide(&[lost(None, true)], false, Duration::from_secs(300)),
            vec![Heal::ReplacePod {
                shard: 1,
                member: 2
            }]
        );
    }

    #[test]
    fn a_member_that_may_hold_the_last_copy_waits_for_its_node() {
        let d = decide(&[lost(Some(3600), false)], false, Duration::ZERO);
        assert!(matches!(&d[0], Heal::Wait { reason, .. } if reason.contains("last copy")));
        let d = decide(&[lost(Some(3600), false)], true, Duration::ZERO);
        assert!(matches!(&d[0], Heal::Wait { .. }));
    }

    #[test]
    fn a_deleted_node_waits_out_the_grace_like_a_not_ready_one() {
        // Just seen gone: 3 s.
        let just_gone = LostMember {
            lost_for: Duration::from_secs(3),
            ..lost(None, true)
        };
        assert!(matches!(
            decide(std::slice::from_ref(&just_gone), false, Duration::ZERO)[0],
            Heal::Wait { .. }
        ));
        let gone_a_minute = LostMember {
            lost_for: Duration::from_secs(60),
            ..just_gone
        };
        assert!(matches!(
            decide(&[gone_a_minute], true, Duration::from_secs(300))[0],
            Heal::Wait { .. }
        ));
    }

    #[test]
    fn a_volume_on_a_lost_node_is_given_up_only_after_the_node_loss_grace() {
        let grace = Duration::from_secs(300);
        assert!(matches!(
            decide(&[lost(Some(60), true)], true, grace)[0],
            Heal::Wait { .. }
        ));
        assert_eq!(
            decide(&[lost(Some(301), true)], true, grace),
            vec![Heal::ReplacePodAndVolume {
                shard: 1,
                member: 2
            }]
        );
    }
}
