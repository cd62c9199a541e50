//! The Valkey cluster layer: what the operator's reconcile needs to know and do about
//! Valkey, and nothing about Kubernetes.
//!
//! - [`parse`]: CLUSTER NODES / CLUSTER SHARDS / INFO / ROLE / GETSLOTMIGRATIONS
//!   replies into typed data.
//! - [`slots`]: slot numbers, ranges and sets; the even split; the rebalance plan.

pub mod parse;
pub mod slots;
