//! valkey-operator: the ValkeyCluster controller and its commands.
//!
//! - [`adapt`]: Kubernetes Nodes, Pods and a ValkeyCluster -> the placement
//!   planner's `Problem` (shared by the controller and `plan`);
//! - [`crd_cmd`]: `valkey-operator crd` and `crd-reference`;
//! - [`crd_reference`]: the Markdown reference generated from a CRD;
//! - [`exporter`]: `valkey-operator exporter`, the per-member metrics sidecar;
//! - [`plan_cmd`]: `valkey-operator plan`;
//! - [`probe_cmd`]: `valkey-operator probe-metrics` (the chart's `helm test`);
//! - [`run`]: `valkey-operator run`, the controller.

pub mod apply;
pub mod backup;
pub mod context;
pub mod controller;
pub mod crd_cmd;
pub mod crd_reference;
pub mod error;
pub mod events;
pub mod exporter;
pub mod exposition;
pub mod http;
pub mod leader;
pub mod malloc;
pub mod metrics;
pub mod plan_cmd;
pub mod probe_cmd;
pub mod reasons;
pub mod replication;
pub mod run;
pub mod system_users;
pub mod topology_cmd;
pub mod watches;
