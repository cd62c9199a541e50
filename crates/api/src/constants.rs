//! Names shared by the operator, its pods and everything that inspects them.
//!
//! These strings are a public contract: pods carry these labels, clients and
//! tests select on them, and server-side apply records the field manager.

/// The API group of every custom resource of this project.
pub const GROUP: &str = "valkey.rs";
/// The served and stored API version.
pub const VERSION: &str = "v1alpha1";
/// The kind of the cluster resource.
pub const KIND: &str = "ValkeyCluster";

/// Label on every object the operator owns: the name of its ValkeyCluster.
pub const LABEL_CLUSTER: &str = "valkey.rs/cluster";
/// The kind of the replication set resource (one primary and its replicas).
pub const KIND_REPLICATION: &str = "ValkeyReplication";
/// Label on every object a ValkeyReplication owns: the set's name.
pub const LABEL_REPLICATION: &str = "valkey.rs/replication";
/// Annotation on a ValkeyReplication: the name of a replica's pod asks the
/// operator for a planned switchover to it (`FAILOVER`, no acknowledged
/// write lost); removed once done or refused.
pub const ANNOTATION_SWITCHOVER: &str = "valkey.rs/switchover";
/// Label on member pods (and their StatefulSets): the shard index, `0..shards`.
pub const LABEL_SHARD: &str = "valkey.rs/shard";
/// Label on member pods (and their StatefulSets): the member index within its
/// shard, `0..=replicas`; member 0 is the primary at creation.
pub const LABEL_MEMBER: &str = "valkey.rs/member";
/// Label on member pods: the live Valkey role, [`ROLE_PRIMARY`] or [`ROLE_REPLICA`].
pub const LABEL_ROLE: &str = "valkey.rs/role";
/// Value of [`LABEL_ROLE`] on a pod whose Valkey is a primary.
pub const ROLE_PRIMARY: &str = "primary";
/// Value of [`LABEL_ROLE`] on a pod whose Valkey is a replica.
pub const ROLE_REPLICA: &str = "replica";
/// Every label key with this prefix belongs to the operator; `spec.podLabels`
/// may not use it.
pub const LABEL_PREFIX: &str = "valkey.rs/";

/// The selector of a cluster's member pods, as `status.selector` gives it
/// to the scale subresource (`valkey.rs/cluster=<name>,valkey.rs/member`).
pub fn member_selector(cluster: &str) -> String {
    format!("{LABEL_CLUSTER}={cluster},{LABEL_MEMBER}")
}
/// The selector of a replication set's member pods, as `status.selector`
/// gives it (`valkey.rs/replication=<name>,valkey.rs/member`).
pub fn replication_member_selector(set: &str) -> String {
    format!("{LABEL_REPLICATION}={set},{LABEL_MEMBER}")
}
/// Annotation on a ValkeyCluster: `"true"` pauses its reconciles (for
/// maintenance); the status says so with the condition `Paused`.
pub const ANNOTATION_PAUSED: &str = "valkey.rs/paused";
/// Annotation on a ValkeyCluster: a new value (any text, e.g. a date)
/// rotates the operator's CA of a TLS cluster without `secretName` once.
pub const ANNOTATION_ROTATE_CA: &str = "valkey.rs/rotate-ca";

/// The one field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "valkey-operator";
/// Finalizer the controller may put on a ValkeyCluster when deletion needs work
/// that owner references cannot do (e.g. PVCs under `reclaimPolicy: Delete`).
pub const FINALIZER: &str = "valkey.rs/cleanup";

/// Valkey client port, on the pod IP.
pub const VALKEY_PORT: u16 = 6379;
/// Valkey cluster bus port (client port + 10000).
pub const CLUSTER_BUS_PORT: u16 = 16379;

/// Name of the metrics exporter container in member pods (`spec.exporter`).
pub const EXPORTER_CONTAINER: &str = "exporter";
/// Name of the Valkey container of member pods (`spec.podTemplate` merges
/// into it by this name).
pub const VALKEY_CONTAINER: &str = "valkey";
/// The volumes of member pods the operator owns: `spec.podTemplate` cannot
/// replace them.
pub const OWNED_VOLUMES: &[&str] = &["config", "users", "tls", "data"];
/// Where the operator mounts its volumes in the Valkey container (the
/// config, the data, the users file, the TLS files): `spec.podTemplate`
/// cannot mount anything there.
pub const OWNED_MOUNT_PATHS: &[&str] = &[
    "/etc/valkey",
    "/data",
    "/etc/valkey-users",
    "/etc/valkey-tls",
];
/// Name of the exporter's container port; monitors select it by this name.
pub const EXPORTER_PORT_NAME: &str = "metrics";
/// The exporter's port, on the pod IP.
pub const EXPORTER_PORT: u16 = 9121;
/// The HTTP path of the exporter's metrics.
pub const EXPORTER_PATH: &str = "/metrics";

/// Name of the Secret the operator keeps the password in when the user names none.
pub fn auth_secret_name(cluster: &str) -> String {
    format!("{cluster}-auth")
}

/// The operator's record of the password the members were last given
/// (key `password`), so that a rotation can log in with the old one.
pub fn auth_applied_secret_name(cluster: &str) -> String {
    format!("{cluster}-auth-applied")
}

/// Name of the Secret with the certificate the members serve when the
/// operator issues it (`ca.crt`, `tls.crt`, `tls.key`).
pub fn tls_secret_name(cluster: &str) -> String {
    format!("{cluster}-tls")
}

/// Name of the Secret with the operator's CA certificate (`ca.crt`): what
/// clients need to trust the members. A contract.
pub fn tls_ca_secret_name(cluster: &str) -> String {
    format!("{cluster}-tls-ca")
}

/// Name of the Secret with the operator's CA key (`ca.crt`, `ca.key`): read
/// by the operator only, never mounted.
pub fn tls_ca_key_secret_name(cluster: &str) -> String {
    format!("{cluster}-tls-ca-key")
}

/// Name of the Secret with the members' users file (key [`USERS_FILE_KEY`]):
/// the `spec.users` the members took, as `user <name> <rules>` lines with
/// password hashes, which every member loads at start. Written by the
/// operator only.
pub fn users_secret_name(cluster: &str) -> String {
    format!("{cluster}-users")
}

/// Key of the users file in [`users_secret_name`].
pub const USERS_FILE_KEY: &str = "users.acl";

/// Key of the replication user's password in [`users_secret_name`]
/// (generated once, kept).
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";

/// The ACL user replicas log in to their primary as (`primaryuser`): it may
/// run only what a replica sends (PSYNC, SYNC, REPLCONF, PING). A system
/// user: the operator defines it, `spec.users` may not.
pub const REPLICATION_USER: &str = "valkey-replication";

/// The operator's own ACL user: it logs in to the members with it (and as
/// `default` only on a member that does not have it yet). It may run only
/// the commands the operator sends, no data command. A system user: the
/// operator defines it, `spec.users` may not.
pub const OPERATOR_USER: &str = "valkey-operator";

/// Key of the operator's own user's password in [`users_secret_name`]
/// (generated once, kept).
pub const OPERATOR_PASSWORD_KEY: &str = "operator-password";

/// Key of the CA certificate in the TLS Secrets.
pub const TLS_CA_KEY: &str = "ca.crt";
/// Key of the certificate in the TLS Secret.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Key of the private key in the TLS Secret.
pub const TLS_KEY_KEY: &str = "tls.key";

/// Name of a member's StatefulSet: `<cluster>-<shard>-<member>`.
pub fn member_name(cluster: &str, shard: u32, member: u32) -> String {
    format!("{cluster}-{shard}-{member}")
}

/// Longest StatefulSet name that still fits the labels Kubernetes derives from
/// it (`controller-revision-hash` = `<name>-<10 chars>` must be a 63-character
/// label value).
pub const MAX_STATEFULSET_NAME: usize = 52;
/// Longest ValkeyCluster name (checked in CEL and in validation): leaves room for
/// `-<shard>-<member>` within [`MAX_STATEFULSET_NAME`].
pub const MAX_CLUSTER_NAME: usize = 40;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_statefulsets_are_named_cluster_shard_member() {
        assert_eq!(member_name("cache", 2, 1), "cache-2-1");
    }

    #[test]
    fn the_operator_keeps_the_password_in_cluster_auth() {
        assert_eq!(auth_secret_name("cache"), "cache-auth");
    }
}
