//! The Valkey cluster layer: what the operator's reconcile needs to know and do about
//! Valkey, and nothing about Kubernetes.
//!
//! - [`parse`]: CLUSTER NODES / CLUSTER SHARDS / CLUSTER INFO / INFO / ROLE / GETSLOTMIGRATIONS
//!   replies into typed data.
//! - [`slots`]: slot numbers, ranges and sets; the even split; the rebalance plan.
//! - [`model`]: the desired topology and the observed cluster, as plain data.
//! - [`actions`]: the admin commands the planner asks for, and why it waits.
//! - [`planner`]: `next_actions(desired, observed)` and `health(desired, observed)`:
//!   pure, idempotent decisions.
//! - [`acl`]: ACL users: `ACL LIST` parsed, the `ACL SETUSER`/`DELUSER` to send (pure).
//! - [`client`]: the side-effect seam: the [`client::Admin`] trait, its redis-rs
//!   implementation (one plain connection per node), `observe_cluster`, `execute`.
//! - [`wire`]: the byte stream under it: TCP or TLS, and the bound on one reply's size.
//!
//! A reconcile step with this crate:
//!
//! ```no_run
//! # async fn step(targets: &[valkey::client::Target], desired: &valkey::DesiredCluster) {
//! use valkey::client::{self, ConnectOptions, ExecuteOptions};
//! let keys = desired.config_keys();
//! let (observed, conns) = client::observe_cluster(targets, &ConnectOptions::default(), &keys).await;
//! let opts = valkey::PlannerOptions::default();
//! if let Ok(plan) = valkey::next_actions(desired, &observed, &opts) {
//!     client::execute_all(&conns, &plan.actions, &ExecuteOptions::default()).await;
//!     // plan.waiting -> conditions/events; plan.removable -> members safe to delete.
//! }
//! let _health = valkey::health(desired, &observed, &opts);
//! # }
//! ```

pub mod acl;
pub mod actions;
pub mod client;
pub mod model;
pub mod parse;
pub mod planner;
pub mod replication;
pub mod slots;
pub mod wire;

pub use actions::{Action, FailoverMode, Plan, ResetMode, Wait};
pub use model::{
    DesiredCluster, DesiredMember, DesiredShard, MemberAddr, MemberIndex, MemberRef, MemberState,
    NodeReport, ObservedCluster, ObservedMember, ShardIndex,
};
pub use parse::NodeId;
pub use planner::{
    Health, HealthIssue, PlanError, PlannerOptions, ReplicaSync, Severity, health, next_actions,
};
pub use slots::{Slot, SlotRange, SlotSet};
