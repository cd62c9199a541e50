//! Where each member should run: the placement planner over the live Nodes
//! and Pods, and what its answer means for the status and the events.
//!
//! The planner itself (crate `placement`) is pure and exact; this module
//! bounds it (search and time limits) and reads its plan.

use crate::memory::Announced;
use crate::notes::{Note, reason};
use crate::view::KubeView;
use api::ValidatedCluster;
use resources::adapt;
use resources::scheduling::MemberPlacement;
use std::time::Duration;

/// At most this many branch-and-bound nodes per placement plan (only when
/// constraint keys cross; nesting keys are planned exactly at once). Real
/// topologies finish far below it; an adversarial one gets the best plan
/// found so far instead of holding the reconcile (and the cores) for seconds.
pub const PLACEMENT_SEARCH_LIMIT: u64 = 20_000;

/// At most this long per placement plan, whatever the machine's speed: the
/// reconcile waits for it.
pub const PLACEMENT_TIME_LIMIT: Duration = Duration::from_secs(1);

/// Said of a plan a search limit cut short.
const NOT_PROVEN_OPTIMAL: &str =
    "the best placement found within the planner's search limits, not proven optimal";

/// A plan's gap in words: what a better plan might do.
pub fn gap_words(gap: Option<placement::Gap>) -> String {
    let gap = gap.unwrap_or_default();
    if gap.unplaced > 0 {
        format!(
            "a plan that places up to {} more members may exist",
            gap.unplaced
        )
    } else if gap.excess > 0 {
        format!(
            "a plan with up to {} fewer Preferred violations may exist",
            gap.excess
        )
    } else if gap.displaced > 0 {
        format!(
            "a plan that moves up to {} fewer running members may exist",
            gap.displaced
        )
    } else {
        "it meets every bound the search proved, but a better plan was not ruled out".to_string()
    }
}

/// The placement plan, or why there is none.
#[derive(Debug, Clone)]
pub enum Placement {
    Planned {
        plan: placement::Plan,
        /// `None` when the plan is proven optimal; else how far it may be
        /// from the optimum (a search limit cut the planner short).
        gap: Option<placement::Gap>,
    },
    /// The planner could not plan; the message says why.
    Failed(String),
}

impl Placement {
    /// The planner's problem for the members of `cluster` over the Nodes and
    /// Pods of `view`, with its bounds; or why there is none (the message of a
    /// [`Placement::Failed`]).
    pub fn problem(
        cluster: &ValidatedCluster,
        view: &KubeView,
    ) -> Result<(placement::Problem, placement::PlanOptions), String> {
        let problem =
            adapt::problem(cluster, &view.nodes, &view.all_pods).map_err(|e| e.to_string())?;
        let options = placement::PlanOptions {
            search_limit: Some(PLACEMENT_SEARCH_LIMIT),
            time_limit: Some(PLACEMENT_TIME_LIMIT),
        };
        Ok((problem, options))
    }

    /// Plans `problem`. CPU-bound for up to [`PLACEMENT_TIME_LIMIT`]: the
    /// operator runs it where it cannot stall other work.
    pub fn solve(problem: &placement::Problem, options: &placement::PlanOptions) -> Placement {
        match placement::plan_with(problem, options) {
            Ok(planned) => Placement::Planned {
                plan: planned.plan,
                gap: planned.gap,
            },
            Err(e) => Placement::Failed(e.to_string()),
        }
    }

    fn plan(&self) -> Option<&placement::Plan> {
        match self {
            Placement::Planned { plan, .. } => Some(plan),
            Placement::Failed(_) => None,
        }
    }

    fn optimal(&self) -> bool {
        match self {
            Placement::Planned { gap, .. } => gap.is_none(),
            Placement::Failed(_) => true,
        }
    }

    /// How far the plan may be from the optimum (see [`Placement::Planned`]).
    fn gap(&self) -> Option<placement::Gap> {
        match self {
            Placement::Planned { gap, .. } => *gap,
            Placement::Failed(_) => None,
        }
    }

    /// Where the plan puts member `(shard, member)`.
    pub fn member(&self, shard: u32, member: u32) -> MemberPlacement {
        let Some(plan) = self.plan() else {
            return MemberPlacement::Unplanned;
        };
        if let Some(p) = plan
            .members
            .iter()
            .find(|p| p.shard == shard && p.member == member)
        {
            return MemberPlacement::Placed {
                node: p.node.clone(),
                domains: p.domains.clone(),
            };
        }
        if let Some(u) = plan
            .unplaced
            .iter()
            .find(|u| u.shard == shard && u.member == member)
        {
            return MemberPlacement::Unplaced {
                reason: u.reason.clone(),
            };
        }
        MemberPlacement::Unplanned
    }

    /// The node the plan puts member `(shard, member)` on, for messages.
    pub fn node_of(&self, shard: u32, member: u32) -> String {
        match self.member(shard, member) {
            MemberPlacement::Placed { node, .. } => node,
            _ => "<unplanned>".to_string(),
        }
    }

    /// The plan moves this running member to another node.
    pub fn moved(&self, shard: u32, member: u32) -> bool {
        self.plan().is_some_and(|p| {
            p.members
                .iter()
                .any(|x| x.shard == shard && x.member == member && x.moved)
        })
    }

    /// The TopologySpread state the plan gives (before moves are counted).
    pub fn spread_state(&self) -> SpreadState {
        let state = self.plan_state();
        if self.optimal() {
            return state;
        }
        let mark = |mut lines: Vec<String>| {
            lines.push(format!("({NOT_PROVEN_OPTIMAL})"));
            lines
        };
        match state {
            SpreadState::Unplaceable(r) => SpreadState::Unplaceable(mark(r)),
            SpreadState::Exceeded(v) => SpreadState::Exceeded(mark(v)),
            other => other,
        }
    }

    fn plan_state(&self) -> SpreadState {
        match self {
            Placement::Planned { plan, .. } if !plan.unplaced.is_empty() => {
                SpreadState::Unplaceable(
                    plan.unplaced
                        .iter()
                        .map(|u| format!("shard {} member {}: {}", u.shard, u.member, u.reason))
                        .collect(),
                )
            }
            Placement::Planned { plan, .. } if !plan.violations.is_empty() => {
                SpreadState::Exceeded(
                    plan.violations
                        .iter()
                        .map(|v| {
                            format!(
                                "shard {}: {} members in {} {} (Preferred at most {})",
                                v.shard,
                                v.members,
                                v.topology_key,
                                v.domain.as_deref().unwrap_or("<nodes without the key>"),
                                v.max_replicas
                            )
                        })
                        .collect(),
                )
            }
            Placement::Planned { .. } => SpreadState::Met,
            Placement::Failed(e) => {
                SpreadState::Unknown(format!("placement could not be planned: {e}"))
            }
        }
    }

    /// The events this plan calls for, given what was announced before
    /// (updated): a standing problem is announced once, and once more when
    /// it is gone.
    pub fn notes(&self, announced: &mut Announced) -> Vec<Note> {
        let mut notes = Vec::new();
        if self.optimal() {
            announced.placement_unproven = false;
        } else if !announced.placement_unproven {
            notes.push(Note::normal(
                reason::PLACEMENT_NOT_PROVEN_OPTIMAL,
                "Plan",
                format!(
                    "using {NOT_PROVEN_OPTIMAL} ({PLACEMENT_SEARCH_LIMIT} search nodes or {PLACEMENT_TIME_LIMIT:?}); \
                     its Required constraints hold; {}",
                    gap_words(self.gap())
                ),
            ));
            announced.placement_unproven = true;
        }
        let (text, warn_reason) = match self.spread_state() {
            SpreadState::Unplaceable(r) => (r.join("; "), Some(reason::MEMBER_UNPLACEABLE)),
            SpreadState::Exceeded(v) => (v.join("; "), Some(reason::SPREAD_VIOLATED)),
            SpreadState::Unknown(m) => (m, Some(reason::MEMBER_UNPLACEABLE)),
            SpreadState::Met | SpreadState::Moving(_) => (String::new(), None),
        };
        if announced.placement.as_deref() == Some(text.as_str()) {
            return notes;
        }
        if let Some(r) = warn_reason {
            notes.push(Note::warning(r, "Plan", text.clone()));
        } else if announced.placement.is_some() {
            notes.push(Note::normal(
                reason::TOPOLOGY_SPREAD_MET,
                "Plan",
                "every replicaSpreadConstraint holds",
            ));
        }
        announced.placement = Some(text);
        notes
    }
}

/// Where the placement planner left the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpreadState {
    /// Every constraint holds.
    Met,
    /// Members the planner cannot place, with its reasons (`shard s member m: reason`).
    Unplaceable(Vec<String>),
    /// Preferred constraints exceeded (one line per violation).
    Exceeded(Vec<String>),
    /// The plan meets every constraint, but members are not there yet (one
    /// line per member to move or moving).
    Moving(Vec<String>),
    /// The planner failed; the message says why.
    Unknown(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(optimal: bool) -> Placement {
        Placement::Planned {
            plan: placement::Plan {
                cluster: "cache".into(),
                feasible: true,
                members: Vec::new(),
                unplaced: Vec::new(),
                violations: Vec::new(),
            },
            gap: (!optimal).then_some(placement::Gap {
                excess: 1,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_failed_plan_is_unknown_spread_and_warned_once() {
        let p = Placement::Failed("no nodes".into());
        assert_eq!(
            p.spread_state(),
            SpreadState::Unknown("placement could not be planned: no nodes".into())
        );
        let mut announced = Announced::default();
        let first = p.notes(&mut announced);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].reason, reason::MEMBER_UNPLACEABLE);
        assert!(p.notes(&mut announced).is_empty());
    }

    #[test]
    fn a_spread_met_again_is_announced_once_after_a_problem() {
        let mut announced = Announced::default();
        // Met from the start: nothing to say.
        assert!(planned(true).notes(&mut announced).is_empty());
        let _ = Placement::Failed("x".into()).notes(&mut announced);
        let met = planned(true).notes(&mut announced);
        assert_eq!(met.len(), 1);
        assert_eq!(met[0].reason, reason::TOPOLOGY_SPREAD_MET);
        assert!(planned(true).notes(&mut announced).is_empty());
    }

    #[test]
    fn a_plan_cut_short_is_announced_once_until_a_proven_one() {
        let mut announced = Announced::default();
        let notes = planned(false).notes(&mut announced);
        assert!(
            notes
                .iter()
                .any(|n| n.reason == reason::PLACEMENT_NOT_PROVEN_OPTIMAL)
        );
        assert!(planned(false).notes(&mut announced).is_empty());
        let _ = planned(true).notes(&mut announced);
        assert!(!announced.placement_unproven);
    }
}
