//! The placement planner: decides, before any pod is scheduled, which node each
//! member of each shard goes to, so that no shard's copies share a failure domain
//! beyond the limits of its `replicaSpreadConstraints`.
//!
//! Pure, exact and deterministic: see [`plan`]. The objective, in this order:
//! most members placed, least Preferred excess, fewest running members
//! displaced; then primaries spread and load balanced.
//!
//! # How
//!
//! * Constraints that can never bind are dropped (maxReplicas >= the shard
//!   size, or finer than a Required constraint with a cap no larger: node
//!   Required 1 under zone Required 1).
//! * When the rest nest (region > zone > node), the problem is one min-cost
//!   flow: source -> shard -> its domains, coarsest first (Required: capped;
//!   Preferred: capped, plus an overflow arc costing one excess) -> a pool per
//!   group of nodes no constraint tells apart -> node (room) -> sink, with a
//!   stay reward on arcs straight to the nodes running members may keep. Costs
//!   are lexicographic triples (excess, stays, balance), so the order of the
//!   objective is exact without big-M weights; a maximum flow of least cost
//!   is the optimum. Shards with nothing running are interchangeable and
//!   planned as one unit, split round-robin (exact, see `network`). Solved by
//!   primal-dual with Dinic blocking flows: few phases, since costs are small.
//! * When some keys cross (zones and racks that span zones), a branch and
//!   bound fixes one shard's members per cell at a time; its bound adds the
//!   excesses of several flow relaxations that each keep a nesting subset
//!   and count disjoint Preferred constraints. Its incumbents go through a
//!   local search (`improve`) that re-places all the members of one zone or
//!   rack at once by a min-cost flow, so it usually stops at the root.
//!
//! # Text output
//!
//! ```text
//! cluster demo: 3 shards x 3 members, 9 placed, 0 unplaced, 0 Preferred violations
//! constraints: topology.kubernetes.io/zone maxReplicas 1 (Required)
//!
//! region r1
//!   zone a
//!     node a0    1/4  s0/m0 primary
//!     node a1    2/4  s1/m2 replica, s2/m1 replica (moved)
//!   zone b
//!     node b0    0/4  - [cordoned]
//! ```
//!
//! Each node shows members planned / room, and why it takes no new member.

mod assign;
mod eligibility;
mod explain;
mod flow;
mod improve;
mod instance;
pub mod model;
mod network;
mod render;
mod search;
mod structure;
mod svg;
mod validate;

pub use eligibility::{room, tolerates};
pub use model::*;
pub use render::render_text;
pub use svg::{Mark, NodeBox, Picture, natural_cmp, render_svg};
pub use validate::{MAX_MEMBERS, MAX_SHARDS, check_label_key, resolve_key, validate};

use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a [`Problem`] cannot be planned at all (as opposed to members that
/// cannot be placed, which a [`Plan`] reports).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PlanError {
    /// A field of the problem is out of range or inconsistent; `field` names it
    /// as the user wrote it (e.g. `spec.replicaSpreadConstraints[1].maxReplicas`).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

impl PlanError {
    /// A stable name for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            PlanError::Invalid { .. } => "invalid_spec",
        }
    }
}

/// Plans `problem`: the optimum of (1) most members placed, (2) least Preferred
/// excess, (3) fewest running members displaced, then primaries spread and load
/// balanced. Deterministic: the same problem (in any node or running-member
/// order) gives the same plan. Fails only when the problem is invalid (see
/// [`validate`]); members that cannot be placed are reported in the plan.
///
/// Always exact. When constraint keys nest this is one min-cost flow; when
/// they cross it is a branch and bound, which is fast for real topologies but
/// exponential at worst: a caller that must answer in bounded time uses
/// [`plan_with`] and a search or time limit.
pub fn plan(problem: &Problem) -> Result<Plan, PlanError> {
    plan_with(problem, &PlanOptions::default()).map(|p| p.plan)
}

/// Limits for [`plan_with`]. Both only bound the branch and bound of crossing
/// keys (nesting keys never search: the flow is exact at once), and neither
/// stops it before it holds a plan that keeps every Required constraint; past
/// a limit the best plan found is returned with `optimal: false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// At most this many search nodes. `None`: no limit.
    pub search_limit: Option<u64>,
    /// At most this much wall-clock time from the call, for callers that must
    /// answer in time whatever the machine's speed (the operator plans inside
    /// a reconcile). `None`: no limit.
    pub time_limit: Option<Duration>,
}

/// A plan and whether it is proven optimal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub plan: Plan,
    /// False only when a limit of [`PlanOptions`] cut the search short.
    pub optimal: bool,
    /// When not proven optimal: how far the plan may be from the optimum.
    pub gap: Option<Gap>,
}

/// How far a plan a search limit cut short may be from the optimum, per part
/// of the objective, as the search proved it: a better plan might place up
/// to `unplaced` more members; one that places as many as possible might
/// have up to `excess` fewer Preferred violations (members over a
/// maxReplicas); and one no worse in both might move up to `displaced` fewer
/// running members. All zero: the plan meets every bound the search proved,
/// though the search could not rule out a better one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gap {
    pub unplaced: u64,
    pub excess: u64,
    pub displaced: u64,
}

/// [`plan`] with limits.
pub fn plan_with(problem: &Problem, options: &PlanOptions) -> Result<Planned, PlanError> {
    // Taken before anything else, so the limit covers the whole call. A limit
    // too far ahead to be an Instant is no limit.
    let limits = search::Limits {
        nodes: options.search_limit,
        deadline: options
            .time_limit
            .and_then(|t| Instant::now().checked_add(t)),
    };
    validate(problem)?;
    let inst = instance::Instance::new(problem);
    let st = structure::Structure::analyse(&inst);
    let shards: Vec<u32> = (0..problem.shards).collect();
    let (solution, gap) = search::solve_with_bound(&inst, &st, &shards, limits);
    let named = assign::name_members(&inst, &st, &solution);
    Ok(Planned {
        plan: assign::build_plan(&inst, &st, &named, limits),
        optimal: gap.is_none(),
        gap: gap.map(|(score, bound)| Gap {
            unplaced: score.unplaced.saturating_sub(bound.unplaced),
            excess: score.excess.saturating_sub(bound.excess),
            displaced: score.displaced.saturating_sub(bound.displaced),
        }),
    })
}
