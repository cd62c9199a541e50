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
//!
//! This crate is pure: no socket, no runtime, no client library. Talking to a
//! server (the admin connection, TLS, the replication stream of a backup) is the
//! `valkey-client` crate's, which turns what it reads into this crate's
//! [`parse::Reply`] and [`ObservedCluster`], and carries out its [`Action`]s.

pub mod acl;
pub mod actions;
pub mod model;
pub mod parse;
pub mod planner;
pub mod slots;

pub use actions::{Action, FailoverMode, Plan, ResetMode, Wait};
pub use model::{
    DesiredCluster, DesiredMember, DesiredShard, MemberAddr, MemberIndex, MemberRef, MemberState,
    NodeReport, ObservedCluster, ObservedMember, ShardIndex,
};
pub use parse::{NodeId, Reply};
pub use planner::{
    Health, HealthIssue, PlanError, PlannerOptions, ReplicaSync, Severity, health, next_actions,
};
pub use slots::{Slot, SlotRange, SlotSet};
