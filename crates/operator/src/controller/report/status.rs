//! The status: conditions computed purely from what the reconcile found, and
//! written only when they changed (a steady cluster costs no status write).
//!
//! Conditions (types and reasons are a contract for users, alerts and tests):
//! - `Ready`: every shard serves its slots with all its members in sync;
//! - `Progressing`: the operator is carrying out a change; the reason names it;
//! - `Degraded`: something is wrong the operator cannot fix right now;
//! - `TopologySpread`: every replicaSpreadConstraint holds (False with the
//!   planner's reason when a Required one cannot be met or a Preferred one is
//!   exceeded, and `MovePending` while members still have to move, or are
//!   moving, to where the plan meets them);
//! - `PrimaryPlacementAligned`: live primaries are spread as balancing wants.

use api::v1alpha1::{
    CONDITION_DEGRADED, CONDITION_PAUSED, CONDITION_PRIMARY_PLACEMENT_ALIGNED,
    CONDITION_PROGRESSING, CONDITION_READY, CONDITION_RESTORED, CONDITION_TOPOLOGY_SPREAD,
    MemberStatus, ShardStatus, ShardTopology, ValkeyClusterStatus,
};
pub use decide::balance::BalanceState;
pub use decide::conditions::{Cond, merge_conditions};
pub use decide::placement::SpreadState;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Where the Valkey side stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    /// All slots served, every desired member joined and in sync, views agree.
    pub ready: bool,
    /// Availability or redundancy is reduced.
    pub degraded: bool,
    /// The most severe reason when not ready (e.g. `SlotsUncovered`).
    pub reason: Option<String>,
    /// One line about it.
    pub message: String,
    /// Work blocked until a person acts (the planner's blocked waits).
    pub blocked: Vec<String>,
}

/// What the operator is doing about it this time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
    /// The cluster has never been Ready and members are being brought together.
    pub bootstrapping: bool,
    /// Valkey commands were sent this reconcile (one line each).
    pub actions: Vec<String>,
    /// Members waiting for a rolling restart.
    pub pending_restarts: usize,
    /// Members to move to where the placement plan now puts them.
    pub pending_moves: usize,
    /// Members being added or removed (scale).
    pub scaling: bool,
    /// Pods not yet running.
    pub pods_pending: usize,
    /// What the Valkey planner waits for that clears by itself (one line
    /// each), shown when nothing else was done.
    pub waiting: Vec<String>,
}

/// Everything the conditions are computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusInput {
    pub generation: Option<i64>,
    pub cluster: ClusterState,
    pub spread: SpreadState,
    pub balance: BalanceState,
    pub activity: Activity,
    /// A problem outside Valkey that keeps the cluster from converging (the
    /// password Secret is missing...), as (reason, message).
    pub blocker: Option<(String, String)>,
    /// Members whose volume claim stays Pending, and why (a root cause: such
    /// a member does not answer either).
    pub volumes_pending: Option<String>,
    /// Members whose pod cannot start (an image that cannot be pulled, a
    /// crash loop), as (reason, message): a root cause too.
    pub start_failed: Option<(String, String)>,
}

/// The five conditions for a valid spec.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn conditions(input: &StatusInput) -> Vec<Cond> {
    let c = &input.cluster;
    let a = &input.activity;
    let unplaceable = match &input.spread {
        SpreadState::Unplaceable(reasons) => Some(reasons.join("; ")),
        _ => None,
    };
    let ready = if c.ready && input.blocker.is_none() {
        Cond::new(CONDITION_READY, true, "ClusterReady", c.message.clone())
    } else {
        // The root cause first: a member that cannot be placed is also one
        // that does not answer.
        let (reason, message) = match (&input.blocker, &unplaceable, &c.reason) {
            (Some((r, m)), _, _) => (r.clone(), m.clone()),
            (None, Some(u), _) => ("MembersUnplaceable".to_string(), u.clone()),
            (None, None, _) if input.start_failed.is_some() => {
                input.start_failed.clone().unwrap_or_default()
            }
            (None, None, _) if input.volumes_pending.is_some() => (
                "VolumeClaimPending".to_string(),
                input.volumes_pending.clone().unwrap_or_default(),
            ),
            (None, None, Some(r)) => (r.clone(), c.message.clone()),
            (None, None, None) => ("NotReady".to_string(), c.message.clone()),
        };
        Cond::new(CONDITION_READY, false, reason, message)
    };

    let progressing = if a.bootstrapping {
        Cond::new(
            CONDITION_PROGRESSING,
            true,
            "Bootstrapping",
            summary_of(a, "forming the cluster"),
        )
    } else if a.scaling {
        Cond::new(
            CONDITION_PROGRESSING,
            true,
            "Scaling",
            summary_of(a, "adding or removing members"),
        )
    } else if a.pending_restarts > 0 {
        Cond::new(
            CONDITION_PROGRESSING,
            true,
            "RollingUpdate",
            format!("{} member(s) to restart, one at a time", a.pending_restarts),
        )
    } else if a.pending_moves > 0 {
        Cond::new(
            CONDITION_PROGRESSING,
            true,
            "RestoringPlacement",
            format!(
                "{} member(s) to move where the placement plan puts them, one at a time",
                a.pending_moves
            ),
        )
    } else if !a.actions.is_empty() || a.pods_pending > 0 || (!c.ready && c.blocked.is_empty()) {
        Cond::new(
            CONDITION_PROGRESSING,
            true,
            "Converging",
            summary_of(a, &c.message),
        )
    } else {
        Cond::new(CONDITION_PROGRESSING, false, "Stable", "nothing to do")
    };

    let degraded = if let Some((reason, message)) = &input.blocker {
        Cond::new(CONDITION_DEGRADED, true, reason.clone(), message.clone())
    } else if !c.blocked.is_empty() {
        Cond::new(CONDITION_DEGRADED, true, "Blocked", c.blocked.join("; "))
    } else if let Some(u) = &unplaceable {
        Cond::new(CONDITION_DEGRADED, true, "MembersUnplaceable", u.clone())
    } else if c.degraded {
        Cond::new(
            CONDITION_DEGRADED,
            true,
            c.reason.clone().unwrap_or_else(|| "Degraded".into()),
            c.message.clone(),
        )
    } else {
        Cond::new(CONDITION_DEGRADED, false, "AsExpected", "")
    };

    let spread = match &input.spread {
        SpreadState::Met => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            true,
            "ConstraintsMet",
            "every replicaSpreadConstraint holds",
        ),
        SpreadState::Unplaceable(r) => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            false,
            "RequiredConstraintUnsatisfiable",
            r.join("; "),
        ),
        SpreadState::Exceeded(v) => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            false,
            "PreferredConstraintExceeded",
            v.join("; "),
        ),
        SpreadState::Moving(v) => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            false,
            "MovePending",
            v.join("; "),
        ),
        SpreadState::Unknown(m) => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            false,
            "PlacementUnknown",
            m.clone(),
        ),
    };

    let balance = match &input.balance {
        BalanceState::Aligned => Cond::new(
            CONDITION_PRIMARY_PLACEMENT_ALIGNED,
            true,
            "PrimariesSpread",
            "live primaries are spread over the topology",
        ),
        BalanceState::Pending(m) => Cond::new(
            CONDITION_PRIMARY_PLACEMENT_ALIGNED,
            false,
            "MovePending",
            m.clone(),
        ),
        BalanceState::Impossible(m) => Cond::new(
            CONDITION_PRIMARY_PLACEMENT_ALIGNED,
            false,
            "MoveImpossible",
            m.clone(),
        ),
        BalanceState::Off(m) => Cond::new(
            CONDITION_PRIMARY_PLACEMENT_ALIGNED,
            false,
            "BalancingOff",
            m.clone(),
        ),
    };
    vec![ready, progressing, degraded, spread, balance]
}

/// Conditions for a spec that failed validation: no further action until it changes.
pub fn invalid_spec_conditions(message: &str) -> Vec<Cond> {
    vec![
        Cond::new(CONDITION_READY, false, "InvalidSpec", message),
        Cond::new(
            CONDITION_PROGRESSING,
            false,
            "InvalidSpec",
            "waiting for the spec to be fixed",
        ),
        Cond::new(CONDITION_DEGRADED, true, "InvalidSpec", message),
    ]
}

/// The conditions of a paused cluster: the earlier ones as they were, but
/// Progressing False, and Paused True.
pub fn paused_conditions(old: &[Condition]) -> Vec<Cond> {
    let why = format!(
        "reconciles paused by the annotation {}: \"true\"; nothing is changed until it is removed",
        api::constants::ANNOTATION_PAUSED
    );
    let mut conds: Vec<Cond> = old
        .iter()
        .filter(|c| c.type_ != CONDITION_PROGRESSING && c.type_ != CONDITION_PAUSED)
        .filter_map(|c| {
            let type_ = KNOWN_CONDITIONS.iter().find(|t| **t == c.type_)?;
            Some(Cond::new(
                type_,
                c.status == "True",
                c.reason.clone(),
                c.message.clone(),
            ))
        })
        .collect();
    conds.push(Cond::new(
        CONDITION_PROGRESSING,
        false,
        "Paused",
        why.clone(),
    ));
    conds.push(Cond::new(CONDITION_PAUSED, true, "Paused", why));
    conds
}

/// Every condition type the operator writes.
const KNOWN_CONDITIONS: &[&str] = &[
    CONDITION_READY,
    CONDITION_PROGRESSING,
    CONDITION_DEGRADED,
    CONDITION_TOPOLOGY_SPREAD,
    CONDITION_PRIMARY_PLACEMENT_ALIGNED,
    CONDITION_PAUSED,
    CONDITION_RESTORED,
];

fn summary_of(a: &Activity, fallback: &str) -> String {
    if let Some(first) = a.actions.first() {
        if a.actions.len() == 1 {
            first.clone()
        } else {
            format!("{first} (and {} more)", a.actions.len() - 1)
        }
    } else if a.pods_pending > 0 {
        format!("{} pod(s) not running yet", a.pods_pending)
    } else if let Some(first) = a.waiting.first() {
        format!("{fallback}: {first}")
    } else {
        fallback.to_string()
    }
}

/// The parts of the status besides the conditions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    pub ready_shards: i32,
    pub shards: Vec<ShardStatus>,
    pub members: Vec<MemberStatus>,
    pub topology: Vec<ShardTopology>,
    pub topology_summary: Option<String>,
    pub last_action: Option<String>,
    pub message: Option<String>,
}

/// The whole new status.
pub fn build(
    old: Option<&ValkeyClusterStatus>,
    conds: &[Cond],
    generation: Option<i64>,
    obs: Observations,
    now: &Time,
) -> ValkeyClusterStatus {
    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let mut conditions = merge_conditions(old_conditions, conds, generation, now);
    // `Restored` is set by the restore step (`controller::restore`), not from
    // the facts: it stays as that step last left it.
    if !conds.iter().any(|c| c.type_ == CONDITION_RESTORED)
        && let Some(restored) = old_conditions
            .iter()
            .find(|c| c.type_ == CONDITION_RESTORED)
    {
        conditions.push(restored.clone());
    }
    ValkeyClusterStatus {
        observed_generation: generation,
        conditions,
        ready_shards: obs.ready_shards,
        shards: obs.shards,
        members: obs.members,
        topology: obs.topology,
        topology_summary: obs.topology_summary,
        // The last action stays until another one replaces it.
        last_action: obs
            .last_action
            .or_else(|| old.and_then(|s| s.last_action.clone())),
        message: obs.message,
        restore: old.and_then(|s| s.restore.clone()),
        // Set by `write_status`, whatever the status: the scale subresource's.
        selector: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> StatusInput {
        StatusInput {
            generation: Some(3),
            cluster: ClusterState {
                ready: true,
                degraded: false,
                reason: None,
                message: "3 shards ready".into(),
                blocked: vec![],
            },
            spread: SpreadState::Met,
            balance: BalanceState::Aligned,
            activity: Activity::default(),
            blocker: None,
            volumes_pending: None,
            start_failed: None,
        }
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_the_reason_a_member_does_not_answer() {
        let mut input = healthy();
        input.cluster.ready = false;
        input.cluster.reason = Some("MemberUnreachable".into());
        input.start_failed = Some(("ImagePullFailed".into(), "member 0/1: image x".into()));
        let ready = find(&conditions(&input), CONDITION_READY).clone();
        assert!(!ready.status);
        assert_eq!(ready.reason, "ImagePullFailed");
        assert_eq!(ready.message, "member 0/1: image x");
    }

    #[test]
    fn a_pending_volume_claim_is_the_reason_a_member_does_not_answer() {
        let mut input = healthy();
        input.cluster.ready = false;
        input.cluster.reason = Some("MemberUnreachable".into());
        input.volumes_pending = Some("member 0/0: volume claim data-c-0-0-0 is Pending".into());
        let cs = conditions(&input);
        let ready = find(&cs, CONDITION_READY);
        assert!(!ready.status);
        assert_eq!(ready.reason, "VolumeClaimPending");
        assert!(ready.message.contains("data-c-0-0-0"), "{}", ready.message);
    }

    fn find<'a>(cs: &'a [Cond], t: &str) -> &'a Cond {
        cs.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn a_paused_cluster_keeps_its_conditions_and_says_it_is_paused() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let old = merge_conditions(&[], &conditions(&healthy()), Some(3), &now);
        let paused = paused_conditions(&old);
        assert!(find(&paused, CONDITION_READY).status);
        assert!(find(&paused, CONDITION_PAUSED).status);
        let progressing = find(&paused, CONDITION_PROGRESSING);
        assert!(!progressing.status);
        assert_eq!(progressing.reason, "Paused");
        // Pausing twice changes nothing.
        let again = paused_conditions(&merge_conditions(&old, &paused, Some(3), &now));
        assert_eq!(again, paused);
    }

    #[test]
    fn a_scale_out_held_back_says_what_it_waits_for() {
        let mut input = healthy();
        input.cluster.ready = false;
        input.cluster.reason = Some("ShardsUnbalanced".into());
        input.cluster.message = "slots are not spread evenly".into();
        input.activity.waiting = vec!["shard 3: a member's client address is not known yet".into()];
        let p = find(&conditions(&input), CONDITION_PROGRESSING).clone();
        assert!(p.status);
        assert_eq!(p.reason, "Converging");
        assert_eq!(
            p.message,
            "slots are not spread evenly: shard 3: a member's client address is not known yet"
        );
    }

    #[test]
    fn a_steady_healthy_cluster_is_ready_stable_and_not_degraded() {
        let cs = conditions(&healthy());
        assert!(find(&cs, CONDITION_READY).status);
        let p = find(&cs, CONDITION_PROGRESSING);
        assert!(!p.status);
        assert_eq!(p.reason, "Stable");
        assert!(!find(&cs, CONDITION_DEGRADED).status);
        assert!(find(&cs, CONDITION_TOPOLOGY_SPREAD).status);
        assert!(find(&cs, CONDITION_PRIMARY_PLACEMENT_ALIGNED).status);
    }

    #[test]
    fn bootstrap_is_progressing_and_not_ready_with_the_valkey_reason() {
        let mut i = healthy();
        i.cluster.ready = false;
        i.cluster.reason = Some("SlotsUncovered".into());
        i.activity.bootstrapping = true;
        i.activity.actions = vec!["CLUSTER MEET 10.0.0.2 6379 16379 on shard 0 member 0".into()];
        let cs = conditions(&i);
        assert_eq!(find(&cs, CONDITION_READY).reason, "SlotsUncovered");
        let p = find(&cs, CONDITION_PROGRESSING);
        assert!(p.status);
        assert_eq!(p.reason, "Bootstrapping");
        assert!(p.message.starts_with("CLUSTER MEET"));
    }

    #[test]
    fn an_unplaceable_member_makes_topology_spread_false_and_degraded() {
        let mut i = healthy();
        i.spread = SpreadState::Unplaceable(vec![
            "shard 0 member 2: zone needs 3 domains, 2 eligible".into(),
        ]);
        let cs = conditions(&i);
        let t = find(&cs, CONDITION_TOPOLOGY_SPREAD);
        assert!(!t.status);
        assert_eq!(t.reason, "RequiredConstraintUnsatisfiable");
        assert!(t.message.contains("2 eligible"));
        assert_eq!(find(&cs, CONDITION_DEGRADED).reason, "MembersUnplaceable");
    }

    #[test]
    fn an_unplaceable_member_is_named_as_the_reason_the_cluster_is_not_ready() {
        let mut i = healthy();
        i.cluster.ready = false;
        i.cluster.degraded = true;
        i.cluster.reason = Some("MemberUnreachable".into());
        i.spread = SpreadState::Unplaceable(vec!["shard 0 member 2: no zone left".into()]);
        let cs = conditions(&i);
        assert_eq!(find(&cs, CONDITION_READY).reason, "MembersUnplaceable");
        assert_eq!(find(&cs, CONDITION_DEGRADED).reason, "MembersUnplaceable");
    }

    #[test]
    fn a_rolling_update_is_named_in_progressing() {
        let mut i = healthy();
        i.activity.pending_restarts = 2;
        let p = conditions(&i)
            .into_iter()
            .find(|c| c.type_ == CONDITION_PROGRESSING)
            .unwrap();
        assert_eq!(p.reason, "RollingUpdate");
    }

    #[test]
    fn a_member_still_moving_keeps_topology_spread_false_until_it_is_there() {
        let mut i = healthy();
        i.spread = SpreadState::Moving(vec!["shard 0 member 2: moving from n1 to n4".into()]);
        i.activity.pending_moves = 1;
        let cs = conditions(&i);
        let spread = find(&cs, CONDITION_TOPOLOGY_SPREAD);
        assert!(!spread.status);
        assert_eq!(spread.reason, "MovePending");
        assert!(spread.message.contains("n4"));
        assert_eq!(
            find(&cs, CONDITION_PROGRESSING).reason,
            "RestoringPlacement"
        );
        assert!(find(&cs, CONDITION_READY).status);
    }

    #[test]
    fn a_blocker_outside_valkey_keeps_the_cluster_not_ready_and_degraded() {
        let mut i = healthy();
        i.blocker = Some((
            "PasswordSecretMissing".into(),
            "Secret mine not found".into(),
        ));
        let cs = conditions(&i);
        assert_eq!(find(&cs, CONDITION_READY).reason, "PasswordSecretMissing");
        assert_eq!(
            find(&cs, CONDITION_DEGRADED).reason,
            "PasswordSecretMissing"
        );
    }

    #[test]
    fn transition_times_stay_while_the_status_stays() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let first = merge_conditions(&[], &conditions(&healthy()), Some(1), &t0);
        let again = merge_conditions(&first, &conditions(&healthy()), Some(1), &t1);
        assert_eq!(first, again, "nothing changed, nothing to write");
        let mut broken = healthy();
        broken.cluster.ready = false;
        let changed = merge_conditions(&first, &conditions(&broken), Some(1), &t1);
        let ready = changed.iter().find(|c| c.type_ == CONDITION_READY).unwrap();
        assert_eq!(ready.last_transition_time, t1);
        let spread = changed
            .iter()
            .find(|c| c.type_ == CONDITION_TOPOLOGY_SPREAD)
            .unwrap();
        assert_eq!(spread.last_transition_time, t0);
    }

    #[test]
    fn an_invalid_spec_is_degraded_and_not_progressing() {
        let cs = invalid_spec_conditions("spec.shards: must be between 1 and 16384");
        assert_eq!(find(&cs, CONDITION_DEGRADED).reason, "InvalidSpec");
        assert!(!find(&cs, CONDITION_PROGRESSING).status);
    }
}
