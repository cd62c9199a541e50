//! valkey-operator: the ValkeyCluster controller and its commands.
//!
//! - [`adapt`]: Kubernetes Nodes, Pods and a ValkeyCluster -> the placement
//!   planner's `Problem` (shared by the controller and `plan`);
//! - [`crd_cmd`]: `valkey-operator crd`;
//! - [`plan_cmd`]: `valkey-operator plan`;
//! - [`run`]: `valkey-operator run`, the controller.

pub mod adapt;
pub mod builders;
pub mod crd_cmd;
pub mod plan_cmd;
pub mod run;
