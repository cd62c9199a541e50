//! The placement planner: decides, before any pod is scheduled, which node each
//! member of each shard goes to, so that no shard's copies share a failure domain
//! beyond the limits of its `replicaSpreadConstraints`.
//!
//! Pure and exact: see [`plan`].

pub mod model;

pub use model::*;

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

/// Plans `problem`: the optimum of (1) most members placed, (2) least Preferred
/// excess, (3) fewest running members displaced, then primaries spread and load
/// balanced. Deterministic.
pub fn plan(problem: &Problem) -> Result<Plan, PlanError> {
    // Placeholder until the planner lands; keeps dependants compiling.
    Err(PlanError::Invalid {
        field: "planner".into(),
        message: format!("not implemented yet (cluster {})", problem.cluster),
    })
}

/// Draws the plan as a person wants to see it: region, zone, node and the
/// members on each with their role; violations and unplaced members called out.
pub fn render_text(problem: &Problem, plan: &Plan) -> String {
    format!("{} ({} shards)\n{:?}\n", plan.cluster, problem.shards, plan.members)
}
