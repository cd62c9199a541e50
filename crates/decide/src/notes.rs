//! The events a decision asks for, and every event reason the operator
//! publishes (the operator's `Events` publishes them).

use crate::facts::ShardView;
use std::collections::HashMap;

/// Event reasons (CamelCase, stable: users, alerts and tests match on them).
/// Every event the operator publishes takes its reason from here or from
/// [`action_reason`].
pub mod reason {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const RESTORE_REFUSED: &str = "RestoreRefused";
    pub const RESTORE_STARTED: &str = "RestoreStarted";
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    pub const RESTORE_COMPLETED: &str = "RestoreCompleted";
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

/// An event a decision asks for (published by the operator's `Events`).
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

/// The primaries that changed since the last reconcile that saw one
/// (Valkey's own failovers included); `primaries` is updated.
pub fn failovers(shards: &[ShardView], primaries: &mut HashMap<u32, u32>) -> Vec<Note> {
    let mut notes = Vec::new();
    for v in shards {
        let Some(p) = v.primary else { continue };
        match primaries.insert(v.shard, p) {
            Some(old) if old != p => notes.push(Note::normal(
                reason::PRIMARY_CHANGED,
                "Failover",
                format!(
                    "shard {}: member {p} is now the primary (was member {old})",
                    v.shard
                ),
            )),
            _ => {}
        }
    }
    notes
}
