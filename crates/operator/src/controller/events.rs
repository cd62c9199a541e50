//! Kubernetes Events on the ValkeyCluster for every action a person wants to
//! know about (bootstrap, MEET, failover, slot migration, scale, rolling
//! restart, placement problems, invalid spec). Publishing is best effort: a
//! failed event is logged, never fails the reconcile.

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Event reasons (CamelCase, stable: users, alerts and tests match on them).
/// Every event the operator publishes takes its reason from here or from
/// [`action_reason`].
pub mod reason {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PAUSED: &str = "ReconcilePaused";
    pub const RESUMED: &str = "ReconcileResumed";
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
    pub const SECRET_CREATED: &str = "PasswordSecretCreated";
    pub const USERS_SECRET_RECREATED: &str = "UsersSecretRecreated";
    pub const SECRET_MISSING: &str = "PasswordSecretMissing";
    pub const TLS_SECRET_MISSING: &str = "TLSSecretMissing";
    pub const CA_CREATED: &str = "CertificateAuthorityCreated";
    pub const CERTIFICATE_ISSUED: &str = "CertificateIssued";
    pub const CA_ROTATION_STARTED: &str = "CARotationStarted";
    pub const CA_SIGNING: &str = "CARotationSigning";
    pub const CA_ROTATED: &str = "CARotated";
    /// `<cluster>-tls-ca-key` was deleted while members trust its CA.
    pub const CA_KEY_LOST: &str = "CAKeyLost";
    pub const TLS_SWITCHING: &str = "TLSSwitching";
    pub const TLS_ENABLED: &str = "TLSEnabled";
    pub const USER_SECRET_MISSING: &str = "UserSecretMissing";
    pub const PASSWORD_ROTATED: &str = "PasswordRotated";
    pub const PASSWORD_ROTATION_WAITING: &str = "PasswordRotationWaiting";
    pub const AUTH_ENABLED: &str = "AuthEnabled";
    pub const AUTH_DISABLED: &str = "AuthDisabled";
    pub const USERS_APPLIED: &str = "UsersApplied";
    pub const VALKEY_COMMAND_FAILED: &str = "ValkeyCommandFailed";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    pub const MEMBER_LOST: &str = "MemberLost";
    pub const MEMBER_REPLACED: &str = "MemberReplaced";
    pub const MEMBER_MOVED: &str = "MemberMoved";
    /// A member's external address was learnt or changed (or external access
    /// was turned off and the members' Services removed).
    pub const EXTERNAL_ADDRESS_CHANGED: &str = "ExternalAddressChanged";
    pub const EXTERNAL_ACCESS_DISABLED: &str = "ExternalAccessDisabled";
    pub const MEMBER_MOVE_ABORTED: &str = "MemberMoveAborted";
    pub const PLACEMENT_NOT_PROVEN_OPTIMAL: &str = "PlacementNotProvenOptimal";
    pub const TOPOLOGY_SPREAD_MET: &str = "TopologySpreadMet";
    pub const VOLUME_EXPANDING: &str = "VolumeExpanding";
    pub const VOLUME_EXPANSION_FAILED: &str = "VolumeExpansionFailed";
}

/// An event a decision asks for (published by [`Events::note`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub text: String,
}

impl Note {
    pub fn normal(reason: &'static str, action: &'static str, text: impl Into<String>) -> Note {
        Note {
            warning: false,
            reason,
            action,
            text: text.into(),
        }
    }

    pub fn warning(reason: &'static str, action: &'static str, text: impl Into<String>) -> Note {
        Note {
            warning: true,
            reason,
            action,
            text: text.into(),
        }
    }
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
///
/// kube's `Recorder` folds events with the same reason and action into one
/// series that keeps the *first* note, so "shard 1 failed over" would show
/// for a later failover of shard 2. Distinct actions therefore get their own
/// Event (a fresh recorder each); only a repeating error uses the shared
/// recorder, so it becomes one series instead of a flood.
pub struct Events<'a> {
    client: kube::Client,
    reporter: Reporter,
    shared: &'a Recorder,
    reference: ObjectReference,
    metrics: &'a Metrics,
}

impl<'a> Events<'a> {
    pub fn new(
        client: kube::Client,
        reporter: Reporter,
        shared: &'a Recorder,
        reference: ObjectReference,
        metrics: &'a Metrics,
    ) -> Self {
        Events {
            client,
            reporter,
            shared,
            reference,
            metrics,
        }
    }

    /// A Normal event.
    pub async fn normal(&self, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(EventType::Normal, reason, action, note.into(), false)
            .await;
    }

    /// A Warning event.
    pub async fn warning(&self, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(EventType::Warning, reason, action, note.into(), false)
            .await;
    }

    /// Publishes the events decisions asked for, in order.
    pub async fn notes(&self, notes: Vec<Note>) {
        for n in notes {
            let type_ = if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.publish(type_, n.reason, n.action, n.text, false).await;
        }
    }

    /// A Warning that may repeat every reconcile: folded into one series.
    pub async fn repeated_warning(&self, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(EventType::Warning, reason, action, note.into(), true)
            .await;
    }

    async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        fold: bool,
    ) {
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
        let result = if fold {
            self.shared.publish(&ev, &self.reference).await
        } else {
            Recorder::new(self.client.clone(), self.reporter.clone())
                .publish(&ev, &self.reference)
                .await
        };
        if let Err(error) = result {
            tracing::warn!(%error, reason, "publishing an event failed");
        }
    }
}
