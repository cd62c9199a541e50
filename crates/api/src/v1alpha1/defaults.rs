//! Default values of the spec, in one place.
//!
//! Each default is used twice: by serde when a manifest is read without an API
//! server (the `plan` command, tests), and in the CRD schema (schemars emits the
//! same value as `default:`), so the API server and the Rust code always agree.

/// Default `spec.shards`.
pub const SHARDS: i32 = 3;
/// Default `spec.replicas`.
pub const REPLICAS: i32 = 1;
/// Default `spec.image`: a Valkey 9 release.
pub const IMAGE: &str = "valkey/valkey:9.1";
/// Default `spec.terminationGracePeriodSeconds`. Valkey's `shutdown-on-sigterm
/// failover` waits up to `shutdown-timeout` (10 s) for a replica to catch up,
/// then the failover itself takes a few seconds; 30 s covers both.
pub const TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// Smallest `spec.terminationGracePeriodSeconds` accepted: shutdown-timeout
/// (10 s) plus a manual failover (up to 5 s).
pub const MIN_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 15;
/// Default `spec.persistence.nodeLossGraceSeconds`.
pub const NODE_LOSS_GRACE_SECONDS: i32 = 300;
/// Default `spec.primaryBalancing.quietPeriodSeconds`.
pub const QUIET_PERIOD_SECONDS: i32 = 60;
/// Default `spec.auth.passwordSecret.key`, and the key of the Secret the
/// operator generates.
pub const PASSWORD_KEY: &str = "password";

/// Default requests and limits of the exporter container
/// (`spec.exporter.resources` unset): (cpu request, memory request, memory
/// limit). The exporter is the operator's binary on one thread, answering a
/// scrape every few seconds: a few MiB resident, idle between scrapes.
pub const EXPORTER_RESOURCES: (&str, &str, &str) = ("10m", "16Mi", "64Mi");

/// The image of the exporter sidecar when the operator is told none
/// (`valkey-operator run --exporter-image`): the operator's own image as
/// `make image` names it.
pub const EXPORTER_IMAGE: &str = concat!("valkey-operator:", env!("CARGO_PKG_VERSION"));

pub(crate) fn shards() -> i32 {
    SHARDS
}
pub(crate) fn replicas() -> i32 {
    REPLICAS
}
pub(crate) fn image() -> String {
    IMAGE.to_string()
}
pub(crate) fn termination_grace_period_seconds() -> i64 {
    TERMINATION_GRACE_PERIOD_SECONDS
}
pub(crate) fn node_loss_grace_seconds() -> i32 {
    NODE_LOSS_GRACE_SECONDS
}
pub(crate) fn quiet_period_seconds() -> i32 {
    QUIET_PERIOD_SECONDS
}
pub(crate) fn password_key() -> String {
    PASSWORD_KEY.to_string()
}
pub(crate) fn enabled() -> bool {
    true
}
pub(crate) fn password_keys() -> Vec<String> {
    vec![PASSWORD_KEY.to_string()]
}
