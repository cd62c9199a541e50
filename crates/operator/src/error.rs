//! The reconcile's errors: one variant per step that can fail, each with the
//! context a person needs, and a stable [`Error::category`] used as the
//! `category` label of `valkey_operator_reconcile_errors_total` and in events.
//!
//! An error never crash-loops the operator: the controller logs it, counts it,
//! publishes it as a `ReconcileError` event and retries the cluster with an
//! exponential back-off (1 s after the first failure, doubling up to 5
//! minutes; see `retry_after` in [`super`]).
//!
//! A missing password Secret (or key) is not an error: it is a condition the
//! cluster waits in (`PasswordSecretMissing`) until the user creates it.

use thiserror::Error;

/// Why one reconcile of one cluster stopped early.
#[derive(Debug, Error)]
pub enum Error {
    /// Reading an object from the API server failed.
    #[error("reading {kind} {name}: {source}")]
    Read {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Applying (server-side) an owned object failed.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Creating the password Secret failed.
    #[error("creating Secret {name}: {source}")]
    CreateSecret {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting an object (a pod to restart or re-place, a removed member) failed.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Patching a pod's labels or annotations failed.
    #[error("patching Pod {name}: {source}")]
    PatchPod {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Writing the status failed.
    #[error("updating the status of {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// An object could not be turned into JSON (a bug, not an input problem).
    #[error("serializing {kind} {name}: {source}")]
    Serialize {
        kind: &'static str,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    /// Making the operator's CA or a certificate failed, or the stored CA is
    /// unusable.
    #[error("TLS: {0}")]
    Tls(#[source] resources::tls::TlsError),
    /// The Valkey planner refused its input (contradictory observation).
    #[error("planning Valkey actions: {0}")]
    ValkeyPlan(#[from] valkey::planner::PlanError),
    /// The object has no name, namespace or uid (cannot happen for objects read
    /// from the API server).
    #[error("the ValkeyCluster lacks metadata.{0}")]
    MissingMetadata(&'static str),
    /// The reconcile ran past its deadline (members that hang or trickle
    /// their replies, an API server that does not answer) and was cut; the
    /// next one starts from the top.
    #[error("the reconcile took longer than {0:?} and was cut")]
    Deadline(std::time::Duration),
    /// An owned object's name is taken by an object the cluster does not own.
    #[error("{kind} {name} exists and is not owned by this ValkeyCluster: rename or delete it")]
    NotOwned { kind: &'static str, name: String },
    /// A command the operator sent a member failed (a replication set's
    /// REPLICAOF or FAILOVER).
    #[error("{command} on {member}: {message}")]
    Valkey {
        member: String,
        command: &'static str,
        message: String,
    },
}

impl Error {
    /// Every value [`Error::category`] returns. The operator starts
    /// `valkey_operator_reconcile_errors_total` at 0 for each, so a healthy
    /// operator's error rate reads 0 rather than no data, and `rate()` sees a
    /// category's first error (a series born at 1 hides it).
    pub const CATEGORIES: [&'static str; 13] = [
        "KubernetesRead",
        "KubernetesApply",
        "SecretCreate",
        "KubernetesDelete",
        "PodPatch",
        "StatusUpdate",
        "Serialize",
        "Tls",
        "ValkeyPlan",
        "MissingMetadata",
        "Deadline",
        "NotOwned",
        "ValkeyCommand",
    ];

    /// Stable name for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Read { .. } => "KubernetesRead",
            Error::Apply { .. } => "KubernetesApply",
            Error::CreateSecret { .. } => "SecretCreate",
            Error::Delete { .. } => "KubernetesDelete",
            Error::PatchPod { .. } => "PodPatch",
            Error::Status { .. } => "StatusUpdate",
            Error::Serialize { .. } => "Serialize",
            Error::Tls(_) => "Tls",
            Error::ValkeyPlan(_) => "ValkeyPlan",
            Error::MissingMetadata(_) => "MissingMetadata",
            Error::Deadline(_) => "Deadline",
            Error::NotOwned { .. } => "NotOwned",
            Error::Valkey { .. } => "ValkeyCommand",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_stable_camel_case_words() {
        assert_eq!(Error::MissingMetadata("uid").category(), "MissingMetadata");
    }

    #[test]
    fn the_list_of_categories_names_each_variant_once() {
        let unique: std::collections::BTreeSet<_> = Error::CATEGORIES.iter().collect();
        assert_eq!(unique.len(), Error::CATEGORIES.len());
        // The variants that can be made without a client: the rest are
        // checked by the match in `category` having one arm per variant and
        // the list having as many entries.
        let serialize = Error::Serialize {
            kind: "Pod",
            name: "p".into(),
            source: serde_json::from_str::<u8>("x").unwrap_err(),
        };
        for e in [serialize, Error::MissingMetadata("uid")] {
            assert!(
                Error::CATEGORIES.contains(&e.category()),
                "{}",
                e.category()
            );
        }
        for c in Error::CATEGORIES {
            assert!(
                c.chars().all(|ch| ch.is_ascii_alphanumeric()),
                "{c} is not one CamelCase word"
            );
        }
    }
}
