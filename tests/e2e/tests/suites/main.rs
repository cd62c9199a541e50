//! The suites on the testbed of this crate, one test binary: each file under tests/ would be a
//! binary of its own that links every dependency again (docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod backup;
mod crd_validation;
mod extensions;
mod external_access;
mod helm_chart;
mod hostile_tenant;
mod operator_bootstrap;
mod operator_delete;
mod operator_heal;
mod operator_incluster;
mod operator_leader;
mod operator_lifecycle;
mod operator_rolling;
mod operator_scale;
mod operator_upgrade;
mod placement_spread;
mod pod_security;
mod raw_manifests;
mod replication;
mod safety_small_clusters;
mod security_reversals;
mod testbed;
mod testbed_outside;
mod tls;
mod topology_chaos;
mod topology_live;
mod users;
