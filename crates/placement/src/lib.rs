//! The placement planner: decides, before any pod is scheduled, which node each
//! member of each shard goes to, so that no shard's copies share a failure domain
//! beyond the limits of its `replicaSpreadConstraints`.
//!
//! Pure and exact: see [`plan`].

pub mod model;

pub use model::*;
