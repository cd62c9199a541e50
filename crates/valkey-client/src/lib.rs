//! Talking to Valkey, the I/O beside the pure `valkey` crate:
//!
//! - [`client`]: the side-effect seam: the [`client::Admin`] trait, its redis-rs
//!   implementation (one plain connection per node), `observe_cluster`, `execute`.
//! - [`wire`]: the byte stream under it: TCP or TLS, and the bound on one reply's size.
//! - [`replication`]: the replication stream a backup reads a snapshot from.
//!
//! A reconcile step with this crate:
//!
//! ```no_run
//! # async fn step(targets: &[valkey_client::client::Target], desired: &valkey::DesiredCluster) {
//! use valkey_client::client::{self, ConnectOptions, ExecuteOptions};
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

pub mod client;
pub mod replication;
pub mod wire;
