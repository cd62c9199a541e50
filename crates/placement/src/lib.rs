//! The placement planner: decides, before any pod is scheduled, which node each
//! member of each shard goes to, so that no shard's copies share a failure domain
//! beyond the limits of its `replicaSpreadConstraints`.
//!
//! Pure and exact: see [`plan`]. The pipeline, one module each:
//!
//! * `validate`: refuse what cannot be planned, naming the field;
//! * `eligibility`: taints, tolerations, cordons, readiness, nodeSelector, room;
//! * `instance` and `structure`: the problem sorted and numbered once, the
//!   constraints that can bind, whether they nest, the cells of nodes;
//! * `flow` and `network`: the min-cost flow that is exact when keys nest;
//! * `search`: branch and bound on top of it when they do not;
//! * `assign`, `explain`, `render`: named members, reasons, the text map.

mod assign;
mod eligibility;
mod explain;
mod flow;
mod instance;
pub mod model;
mod network;
mod render;
mod search;
mod structure;
mod validate;

pub use eligibility::{room, tolerates};
pub use model::*;
pub use render::render_text;
pub use validate::{MAX_MEMBERS, MAX_SHARDS, check_label_key, resolve_key, validate};

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
/// order) gives the same plan.
///
/// Constraint keys may be given as aliases (`zone`) or resolved; the plan
/// always names resolved keys.
pub fn plan(problem: &Problem) -> Result<Plan, PlanError> {
    validate(problem)?;
    let inst = instance::Instance::new(problem);
    let st = structure::Structure::analyse(&inst);
    let shards: Vec<u32> = (0..problem.shards).collect();
    let solution = search::solve(&inst, &st, &shards);
    let named = assign::name_members(&inst, &st, &solution);
    Ok(assign::build_plan(&inst, &st, &named))
}
