//! Every reason the operator sets on a condition or gives an event, and what
//! it means: the source of docs/reference/reasons.md (`valkey-operator
//! crd-reference --kind reasons`, drift-checked by `make crd-check`). A test
//! reads the code that sets reasons and fails on one this table misses.

use std::fmt::Write as _;

/// One reason, where it shows, and what it means.
pub struct Reason {
    pub name: &'static str,
    /// The object it shows on.
    pub object: &'static str,
    /// Where: a condition's type, or `event` (`Warning event` for a warning).
    pub shown: &'static str,
    pub meaning: &'static str,
}

const fn r(
    name: &'static str,
    object: &'static str,
    shown: &'static str,
    meaning: &'static str,
) -> Reason {
    Reason {
        name,
        object,
        shown,
        meaning,
    }
}

const VKC: &str = "ValkeyCluster";
const VKB: &str = "ValkeyBackup";
const VKBS: &str = "ValkeyBackupSchedule";
const VKR: &str = "ValkeyReplication";

/// Every reason, grouped by object, then as a user meets them.
#[rustfmt::skip]
pub const REASONS: &[Reason] = &[
    // ValkeyCluster: Ready
    r("ClusterReady", VKC, "Ready; event", "every slot is served, every shard has its primary and its replicas in sync, every member's pod is Ready"),
    r("NotReady", VKC, "Ready", "not Ready for no more precise reason (the message says what is awaited)"),
    r("SlotsUncovered", VKC, "Ready; Degraded", "slots no reachable primary serves: clients get errors for their keys"),
    r("ShardWithoutPrimary", VKC, "Ready; Degraded", "a shard has no reachable primary (a failover is awaited)"),
    r("MemberUnreachable", VKC, "Ready; Degraded", "a member does not answer (its pod is starting, gone, or its node lost)"),
    r("ReplicaMissing", VKC, "Ready; Degraded", "a replica does not follow its shard's primary"),
    r("ReplicaNotInSync", VKC, "Ready", "a replica follows its primary but has not caught up yet"),
    r("ViewsDisagree", VKC, "Ready", "the members' views of slots and roles differ (gossip is converging)"),
    r("SlotMigrationInProgress", VKC, "Ready; Progressing", "slots are moving between shards (a scale out or in)"),
    r("StaleNodes", VKC, "Ready", "the members know node ids no member claims; they are forgotten"),
    r("SlotsUnbalanced", VKC, "Ready", "shards are further than one slot from even; slots move"),
    r("LeavingMembers", VKC, "Ready", "members outside the spec still run; they leave once empty"),
    r("MemberNotJoined", VKC, "Ready", "a member of the spec has not joined the cluster yet"),
    r("PrimaryNotPreferred", VKC, "Ready", "a shard's live primary is not the one the operator moves to (a roll or balancing)"),
    r("ClusterStateFail", VKC, "Ready; Degraded", "a member reports `cluster_state:fail` and refuses queries"),
    r("MembersUnplaceable", VKC, "Ready; Degraded", "a member cannot be placed (a Required constraint, or no room); its pod stays Pending"),
    r("MemberPodNotCreated", VKC, "Ready; Warning event", "a member's StatefulSet could not create its pod; the message is the API server's (a PriorityClass, a quota, Pod Security, a webhook)"),
    r("MemberNotScheduled", VKC, "Ready; Warning event", "a member's pod is not scheduled; the message is the scheduler's"),
    r("MemberCannotStart", VKC, "Ready; Warning event", "a member's container does not start (a crash loop, a bad config, a module that does not load)"),
    r("ImagePullFailed", VKC, "Ready; Warning event", "a member's image cannot be pulled"),
    r("VolumeClaimPending", VKC, "Ready", "a member's volume claim is not bound"),
    r("PasswordSecretMissing", VKC, "Ready; Degraded; Warning event", "the password Secret is missing and the members' password is recorded nowhere: nothing is changed until it is back"),
    r("TLSSecretMissing", VKC, "Ready; Degraded; Warning event", "the TLS Secret the spec names is missing"),
    r("InvalidSpec", VKC, "Ready; Warning event", "the spec was refused; the message names the field, and the cluster is left as it runs"),
    // ValkeyCluster: Progressing
    r("Bootstrapping", VKC, "Progressing", "the cluster is being formed"),
    r("Scaling", VKC, "Progressing", "members are being added or removed"),
    r("RollingUpdate", VKC, "Progressing", "members restart one at a time onto a new spec"),
    r("RestoringPlacement", VKC, "Progressing", "members move where the placement plan puts them, one at a time"),
    r("Converging", VKC, "Progressing", "commands were sent or pods are pending; the message says what"),
    r("Stable", VKC, "Progressing", "nothing to do"),
    r("Paused", VKC, "Progressing; Paused", "the `valkey.rs/paused` annotation is set: the operator changes nothing"),
    // ValkeyCluster: Degraded
    r("AsExpected", VKC, "Degraded", "nothing is degraded"),
    r("Blocked", VKC, "Degraded", "the Valkey planner refuses a step that could lose data; the message says which"),
    r("Degraded", VKC, "Degraded", "availability or redundancy is reduced, for no more precise reason"),
    // ValkeyCluster: TopologySpread
    r("ConstraintsMet", VKC, "TopologySpread", "every replicaSpreadConstraint holds"),
    r("RequiredConstraintUnsatisfiable", VKC, "TopologySpread", "a Required constraint cannot be met with the nodes there are"),
    r("PreferredConstraintExceeded", VKC, "TopologySpread", "a Preferred constraint is exceeded (the best placement there is)"),
    r("MovePending", VKC, "TopologySpread; PrimaryPlacementAligned", "a member or a primary is to move, once the cluster is quiet"),
    r("PlacementUnknown", VKC, "TopologySpread", "the placement could not be planned; the message says why"),
    // ValkeyCluster: PrimaryPlacementAligned
    r("PrimariesSpread", VKC, "PrimaryPlacementAligned", "live primaries are spread over the topology"),
    r("MoveImpossible", VKC, "PrimaryPlacementAligned", "no failover spreads the primaries further"),
    r("BalancingOff", VKC, "PrimaryPlacementAligned", "primary balancing is off in the spec"),
    // ValkeyCluster: Restored (with spec.restore)
    r("Restoring", VKC, "Restored", "the members load the backup"),
    r("Restored", VKC, "Restored", "every shard loaded its part of the backup"),
    r("RestoreFailed", VKC, "Restored; Warning event", "a member could not load its part of the backup; the message says which and why"),
    r("BackupNotFound", VKC, "Restored; Ready", "the ValkeyBackup spec.restore names does not exist; nothing is made"),
    r("BackupNotCompleted", VKC, "Restored; Ready", "the backup has not completed yet; the restore waits"),
    r("BackupFailed", VKC, "Restored; Ready", "the backup failed; nothing is made"),
    r("BackupUnreadable", VKC, "Restored; Ready", "the backup's manifest or objects cannot be read; nothing is made"),
    r("ShardCountMismatch", VKC, "Restored; Ready", "the backup has another number of shards than the spec; nothing is made"),
    r("ChecksumMismatch", VKC, "Restored; Ready", "an object of the backup differs from its manifest; nothing is made"),
    // ValkeyCluster: events
    r("RestoreRefused", VKC, "Warning event", "a restore cannot use its backup (the Restored condition says why)"),
    r("RestoreStarted", VKC, "event", "the members start loading the backup"),
    r("RestoreCompleted", VKC, "event", "every shard loaded its part of the backup"),
    r("ReconcilePaused", VKC, "event", "the `valkey.rs/paused` annotation was set"),
    r("ReconcileResumed", VKC, "event", "the `valkey.rs/paused` annotation was removed"),
    r("ClusterNotReady", VKC, "Warning event", "a Ready cluster stopped being Ready"),
    r("MemberCreated", VKC, "event", "a member's StatefulSet was created"),
    r("MemberRemoved", VKC, "event", "a member outside the spec left the cluster and its StatefulSet was deleted"),
    r("MemberUnplaceable", VKC, "Warning event", "a member cannot be placed"),
    r("SpreadViolated", VKC, "Warning event", "a Preferred constraint is exceeded"),
    r("TopologySpreadMet", VKC, "event", "every constraint holds again"),
    r("PlacementNotProvenOptimal", VKC, "event", "the planner's search limits cut it short: the plan may not be the best"),
    r("PodReplaced", VKC, "event", "a Pending pod was re-created with new scheduling rules"),
    r("RollingRestart", VKC, "event", "a member is restarted onto a new spec"),
    r("RollingUpdateBlocked", VKC, "Warning event", "a member is not restarted because its data has no other copy (a shard with no replica and no volume)"),
    r("PrimaryChanged", VKC, "event", "a shard's primary changed (a failover, the operator's or Valkey's own)"),
    r("MemberLost", VKC, "Warning event", "a member's node is lost; it is replaced once that is safe"),
    r("MemberReplaced", VKC, "event", "a member on a lost node was re-created"),
    r("MemberMoved", VKC, "event", "a member's move started or finished (new copy first, old copy removed once in sync)"),
    r("MemberMoveAborted", VKC, "Warning event", "a move was given up; the member stays where it was"),
    r("MemberMet", VKC, "event", "a member was introduced to the cluster (CLUSTER MEET)"),
    r("SlotsAssigned", VKC, "event", "slots were assigned to a primary"),
    r("ReplicaAttached", VKC, "event", "a member was made a replica of its shard's primary"),
    r("NodeForgotten", VKC, "event", "the members forgot a node id no member claims"),
    r("Failover", VKC, "event", "a replica was made its shard's primary"),
    r("SlotMigration", VKC, "event", "slots were moved between shards"),
    r("NodeReset", VKC, "event", "a member was reset to join the cluster afresh"),
    r("ConfigApplied", VKC, "event", "a setting was applied live (CONFIG SET)"),
    r("ValkeyAction", VKC, "event", "another Valkey command the planner sent"),
    r("ValkeyCommandFailed", VKC, "Warning event", "a Valkey command failed; the next reconcile tries again"),
    r("ReconcileError", VKC, "Warning event", "a reconcile failed; the message says at which step, and it is retried"),
    r("PasswordSecretCreated", VKC, "event", "the operator made the password Secret"),
    r("UsersSecretRecreated", VKC, "event", "the users' Secret was deleted and made again"),
    r("UserSecretMissing", VKC, "Warning event", "a user's password Secret is missing; that user is left as it is"),
    r("UsersApplied", VKC, "event", "ACL users were set or deleted on the members"),
    r("PasswordRotated", VKC, "event", "every member takes the new password only"),
    r("PasswordRotationWaiting", VKC, "Warning event", "a password rotation waits for members that do not answer"),
    r("AuthEnabled", VKC, "event", "auth was turned on: the members restart onto the password"),
    r("AuthDisabled", VKC, "event", "auth was turned off: every member runs without a password"),
    r("CertificateAuthorityCreated", VKC, "event", "the operator made the cluster's CA"),
    r("CertificateIssued", VKC, "event", "the members' certificate was issued (new, expiring, or new addresses)"),
    r("CARotationStarted", VKC, "event", "a CA rotation started: members trust the old and the new CA"),
    r("CARotationSigning", VKC, "event", "the new CA signs the members' certificate"),
    r("CARotated", VKC, "event", "members trust the new CA only"),
    r("CAKeyLost", VKC, "Warning event", "the CA's key Secret was deleted while members trust its CA; a new CA takes over without cutting anyone off"),
    r("TLSSwitching", VKC, "event", "TLS is being turned on for a live cluster"),
    r("TLSEnabled", VKC, "event", "every member speaks TLS only"),
    r("ExternalAddressChanged", VKC, "event", "a member's external address was learnt or changed"),
    r("ExternalAccessDisabled", VKC, "event", "external access was turned off and the members' Services removed"),
    r("VolumeExpanding", VKC, "event", "a member's volume is being grown"),
    r("VolumeExpansionFailed", VKC, "Warning event", "a volume cannot be grown (its StorageClass does not allow it)"),
    // ValkeyBackup
    r("BackupStarted", VKB, "event", "the backup Job started"),
    r("BackupCompleted", VKB, "event", "every shard's snapshot is in the store, with its manifest"),
    r("BackupObjectsRetained", VKB, "event", "the ValkeyBackup was deleted with deletionPolicy Retain: its objects stay"),
    r("BackupObjectsDeleted", VKB, "event", "the ValkeyBackup was deleted and its objects with it"),
    r("BackupObjectsNotDeleted", VKB, "Warning event", "deleting the backup's objects failed; it is retried"),
    r("BackupObjectsLeft", VKB, "Warning event", "the backup's objects could not be deleted and are left in the store"),
    // ValkeyBackupSchedule
    r("InvalidSchedule", VKBS, "Warning event", "the schedule's cron expression does not parse"),
    r("BackupScheduled", VKBS, "event", "a ValkeyBackup was made for a run of the schedule"),
    r("BackupSkipped", VKBS, "event", "a run was skipped: the previous backup is still unfinished"),
    r("BackupPruned", VKBS, "event", "a ValkeyBackup beyond the schedule's keep was deleted"),
    // ValkeyReplication: Ready
    r("Ready", VKR, "Ready", "the primary serves and every replica of the spec follows it in sync, every member's pod Ready"),
    r("NoPrimary", VKR, "Ready; Degraded", "no member serves as the primary and none answers to be promoted (or the first members are awaited)"),
    r("PrimaryNotAnswering", VKR, "Ready", "the primary does not answer; the operator fails over if it does not within 5 s"),
    r("FailingOver", VKR, "Ready; Progressing", "the operator promotes the most advanced replica (or, at creation, the first primary)"),
    r("SwitchingOver", VKR, "Ready; Progressing", "a planned switchover (FAILOVER TO): asked for by annotation, a scale-in or a roll"),
    r("MembersMissing", VKR, "Ready; Progressing", "members of the spec have no pod yet"),
    r("ReplicaNotInSync", VKR, "Ready; Progressing", "a replica does not follow the primary with its link up yet (or the primary's pod is not Ready)"),
    r("InvalidSpec", VKR, "Ready; Degraded; Warning event", "the spec was refused; the message names the field"),
    r("PasswordSecretMissing", VKR, "Ready; Degraded", "the password Secret the spec names is missing, or lacks its key"),
    r("Paused", VKR, "Ready; Progressing; Degraded", "the `valkey.rs/paused` annotation is set: the operator changes nothing"),
    // ValkeyReplication: Progressing, Degraded, TopologySpread
    r("RollingUpdate", VKR, "Progressing", "members restart one at a time onto a new spec, replicas first, the primary after a switchover"),
    r("Stable", VKR, "Progressing", "nothing to do"),
    r("AsExpected", VKR, "Degraded", "nothing is degraded"),
    r("Met", VKR, "TopologySpread", "every replicaSpreadConstraint holds"),
    r("Unplaceable", VKR, "TopologySpread", "a member cannot be placed (a Required constraint, or no room)"),
    r("Exceeded", VKR, "TopologySpread", "a Preferred constraint is exceeded (the best placement there is)"),
    r("Moving", VKR, "TopologySpread", "members are to move where the plan puts them"),
    r("Unknown", VKR, "TopologySpread", "the placement could not be planned; the message says why"),
    // ValkeyReplication: events
    r("PrimaryChanged", VKR, "event", "the operator failed over: which member is the primary now, and why"),
    r("ClusterReady", VKR, "event", "the set became Ready"),
    r("PasswordSecretCreated", VKR, "event", "the operator generated the password Secret `<name>-auth`"),
    r("ValkeyCommandFailed", VKR, "Warning event", "a REPLICAOF or FAILOVER the operator sent failed; it is tried again"),
    r("SwitchoverRefused", VKR, "Warning event", "the `valkey.rs/switchover` annotation names no replica in sync with the primary; it is removed"),
];

/// The table as Markdown (docs/reference/reasons.md).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Reasons reference\n\n\
         Every reason the operator sets on a condition (`status.conditions[].reason`) or gives an event\n\
         (`kubectl get events`), generated from the code (`valkey-operator crd-reference --kind reasons`);\n\
         [Troubleshooting](../guide/troubleshooting.md) says what to do about the common ones.\n",
    );
    for object in [VKC, VKB, VKBS, VKR] {
        let _ = write!(
            out,
            "\n## {object}\n\n| Reason | Shown as | What it means |\n|---|---|---|\n"
        );
        for reason in REASONS.iter().filter(|r| r.object == object) {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} |",
                reason.name, reason.shown, reason.meaning
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Literals in the code that sets reasons which are not reasons: event
    /// actions, object kinds, phases, Valkey command kinds.
    #[rustfmt::skip]
    const NOT_REASONS: &[&str] = &[
        "AddSlotsRange", "AnnounceAddress", "Backup", "BumpEpoch", "ConfigSet", "ConflictingPrimaries", "CreateSecret",
        "Delete", "Failed", "Forget", "Job", "Meet", "MemberHoldsKeys", "MigrateSlots", "NoInSyncReplica",
        "OrphanOwnsSlots", "Pending", "PrimaryCandidateIsReplica", "Ready", "Replicate", "ResetNode",
        "Reconcile", "Running", "S3", "Schedule", "SeparateCluster", "Succeeded", "Switchover", "True", "Validate", "ValkeyBackup",
        "ValkeyBackupSchedule", "ValkeyCluster",
    ];

    /// The code that sets reasons, its tests left out.
    const SOURCES: &[(&str, &str)] = &[
        ("decide notes.rs", include_str!("../../decide/src/notes.rs")),
        (
            "report/status.rs",
            include_str!("controller/report/status.rs"),
        ),
        ("report/mod.rs", include_str!("controller/report/mod.rs")),
        ("backup/controller.rs", include_str!("backup/controller.rs")),
        ("backup/schedule.rs", include_str!("backup/schedule.rs")),
        ("backup/restore.rs", include_str!("backup/restore.rs")),
        (
            "decide replication.rs",
            include_str!("../../decide/src/replication.rs"),
        ),
        (
            "replication/report.rs",
            include_str!("replication/report.rs"),
        ),
        (
            "replication/reconcile.rs",
            include_str!("replication/reconcile.rs"),
        ),
        (
            "valkey health.rs",
            include_str!("../../valkey/src/planner/health.rs"),
        ),
        (
            "valkey actions.rs",
            include_str!("../../valkey/src/actions.rs"),
        ),
    ];

    /// The `"CamelCase"` string literals of `text` outside comments and tests.
    fn literals(text: &str) -> BTreeSet<String> {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut out = BTreeSet::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or_default();
            for part in line.split('"').skip(1).step_by(2) {
                let camel = part.chars().next().is_some_and(char::is_uppercase)
                    && part.len() > 1
                    && part.chars().all(char::is_alphanumeric);
                if camel {
                    out.insert(part.to_string());
                }
            }
        }
        out
    }

    #[test]
    fn every_reason_the_code_sets_is_in_the_table() {
        let known: BTreeSet<&str> = REASONS.iter().map(|r| r.name).collect();
        let mut missing = Vec::new();
        for (file, text) in SOURCES {
            for lit in literals(text) {
                // Waits are the planner's log and metric labels, not reasons.
                let wait = lit.starts_with("WaitingFor");
                if !known.contains(lit.as_str()) && !NOT_REASONS.contains(&lit.as_str()) && !wait {
                    missing.push(format!("{file}: {lit}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "reasons missing from REASONS: {missing:?}"
        );
    }

    #[test]
    fn each_reason_is_listed_once_per_object() {
        let mut seen = BTreeSet::new();
        for r in REASONS {
            assert!(seen.insert((r.object, r.name)), "{} twice", r.name);
            assert!(
                !r.meaning.is_empty() && !r.meaning.contains('|'),
                "{}",
                r.name
            );
        }
    }
}
