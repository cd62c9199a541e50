//! Kubernetes Events on the ValkeyCluster for every action a person wants to
//! know about (bootstrap, MEET, failover, slot migration, scale, rolling
//! restart, placement problems, invalid spec). Publishing is best effort: a
//! failed event is logged, never fails the reconcile.

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Event reasons (CamelCase, stable).
pub mod reason {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const CLUSTER_READY: &str = "ClusterReady";
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    pub const MEMBER_CREATED: &str = "MemberCreated";
    pub const MEMBER_REMOVED: &str = "MemberRemoved";
    pub const MEMBER_UNPLACEABLE: &str = "MemberUnplaceable";
    pub const SPREAD_VIOLATED: &str = "SpreadViolated";
    pub const POD_REPLACED: &str = "PodReplaced";
    pub const ROLLING_RESTART: &str = "RollingRestart";
    pub const ROLLING_BLOCKED: &str = "RollingUpdateBlocked";
    pub const PRIMARY_CHANGED: &str = "PrimaryChanged";
    pub const PRIMARY_BALANCING: &str = "PrimaryBalancing";
    pub const SECRET_CREATED: &str = "PasswordSecretCreated";
    pub const SECRET_MISSING: &str = "PasswordSecretMissing";
    pub const VALKEY_COMMAND_FAILED: &str = "ValkeyCommandFailed";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
}

/// The event reason of a Valkey action.
pub fn action_reason(kind: &str) -> &'static str {
    match kind {
        "Meet" => "MemberMet",
        "AddSlotsRange" => "SlotsAssigned",
        "Replicate" => "ReplicaAttached",
        "Forget" => "NodeForgotten",
        "Failover" => "Failover",
        "MigrateSlots" => "SlotMigration",
        "ResetNode" => "NodeReset",
        "ConfigSet" => "ConfigApplied",
        _ => "ValkeyAction",
    }
}

/// Publishes events about one ValkeyCluster.
pub struct Events<'a> {
    recorder: &'a Recorder,
    reference: ObjectReference,
    metrics: &'a Metrics,
}

impl<'a> Events<'a> {
    pub fn new(recorder: &'a Recorder, reference: ObjectReference, metrics: &'a Metrics) -> Self {
        Events {
            recorder,
            reference,
            metrics,
        }
    }

    /// A Normal event.
    pub async fn normal(&self, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(EventType::Normal, reason, action, note.into())
            .await;
    }

    /// A Warning event.
    pub async fn warning(&self, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(EventType::Warning, reason, action, note.into())
            .await;
    }

    async fn publish(&self, type_: EventType, reason: &str, action: &str, note: String) {
        let mut note = note;
        if note.len() > 1000 {
            let mut end = 997;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        self.metrics.api_write("Event", "create");
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&ev, &self.reference).await {
            tracing::warn!(%error, reason, "publishing an event failed");
        }
    }
}
