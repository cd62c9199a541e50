//! valkey.conf: what the operator owns, what the user adds, and which of the
//! user's keys Valkey takes live (CONFIG SET) versus at start only (restart).
//!
//! The file is rendered in three sections, and Valkey keeps the *last* value of
//! a key it reads, so the order is the precedence:
//! 1. defaults the user may override (`appendonly`, `save`, `shutdown-timeout`,
//!    `cluster-require-full-coverage`...);
//! 2. the user's `spec.config` (owned keys were refused by validation);
//! 3. the settings the operator owns (cluster mode, ports, files...), last so
//!    that nothing above can change them.
//!
//! Per-pod values (`cluster-announce-ip`, the password) are not in the file:
//! they come as `valkey-server` arguments expanded from the pod's environment
//! (see [`super::statefulset`]); `availability-zone` is set live by the
//! operator once the pod's node is known.

use api::{SetKind, ValidatedCluster};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `cluster-node-timeout`, in milliseconds. Valkey's default (15 s) is tuned
/// for bare metal; on Kubernetes a pod that stops answering for 5 s is either
/// gone or on a node that is going NotReady, and failing over sooner shortens
/// the write outage. Not lower: a garbage-collected or CPU-throttled pod must
/// not trigger spurious failovers, and a majority must still agree within 2x.
pub const CLUSTER_NODE_TIMEOUT_MS: u32 = 5000;
/// `cluster-node-timeout` while a cluster without data bootstraps, set live
/// (see `decide::node_timeout_ms`): its members then ping each peer at
/// least every 0.5 s, so the slots and roles the operator assigned reach
/// every member in about half a second instead of up to 2.5 s.
pub const BOOTSTRAP_NODE_TIMEOUT_MS: u32 = 1000;
/// The config key of the two above.
pub const NODE_TIMEOUT: &str = "cluster-node-timeout";
/// Seconds a primary waits on SIGTERM for a replica to catch up before it
/// hands over its slots (`shutdown-on-sigterm failover`).
pub const SHUTDOWN_TIMEOUT_SECONDS: u32 = 10;
/// Where data and nodes.conf live: the PVC when persistence is on, else an emptyDir.
pub const DATA_DIR: &str = "/data";
/// nodes.conf, on the data volume so a restarted pod keeps its node id.
pub const NODES_CONF: &str = "/data/nodes.conf";
/// Where the ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/valkey";
/// Where the TLS Secret (`ca.crt`, `tls.crt`, `tls.key`) is mounted.
pub const TLS_DIR: &str = "/etc/valkey-tls";
/// Where the users Secret (`<cluster>-users`) is mounted.
pub const USERS_DIR: &str = "/etc/valkey-users";
/// Seconds between Valkey's checks of its TLS files: a renewed certificate
/// is served this long after the kubelet has refreshed the Secret volume.
pub const TLS_RELOAD_SECONDS: u32 = 10;
/// The key of valkey.conf in the ConfigMap (and its file name).
pub const CONFIG_FILE: &str = "valkey.conf";

/// valkey.conf keys Valkey refuses to change at runtime (IMMUTABLE or
/// PROTECTED configs of Valkey 9.1: measured by CONFIG SET of every key of
/// `CONFIG GET *` on valkey-server 9.1.2), plus directives that are not configs
/// at all (`loadmodule`). A change of one of these needs a rolling restart;
/// every other key goes in with CONFIG SET.
const RESTART_KEYS: &[&str] = &[
    "aclfile",
    "always-show-logo",
    "aof-rewrite-cpulist",
    "appenddirname",
    "appendfilename",
    "bgsave-cpulist",
    "bio-cpulist",
    "cluster-config-file",
    "cluster-databases",
    "cluster-enabled",
    "cluster-port",
    "daemonize",
    "databases",
    "dbfilename",
    "dir",
    "disable-thp",
    "enable-debug-command",
    "enable-module-command",
    "enable-protected-configs",
    "hash-seed",
    "loadmodule",
    "logfile",
    "mptcp",
    "pidfile",
    "rdbchecksum",
    "rdma-bind",
    "rdma-completion-vector",
    "rdma-port",
    "rdma-rx-size",
    "repl-mptcp",
    "server-cpulist",
    "set-proc-title",
    "socket-mark-id",
    "supervised",
    "syslog-enabled",
    "syslog-facility",
    "syslog-ident",
    "tcp-backlog",
];

/// Whether Valkey reads `key` at start only, so changing it needs a restart.
/// Keys compare case-insensitively, and `_` spellings (`bio_cpulist`) as `-`.
pub fn requires_restart(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('_', "-");
    RESTART_KEYS.contains(&key.as_str())
}

/// The keys Valkey takes live, applied with CONFIG SET on every member (no
/// restart): the user's, and, unless the user set them,
/// [`DISKLESS_SYNC_MAX_REPLICAS`] at the shard's replica count and
/// [`DISKLESS_LOAD`] at `on-empty-db`.
pub fn live_config(cluster: &ValidatedCluster) -> BTreeMap<String, String> {
    let mut live: BTreeMap<String, String> = cluster
        .config
        .iter()
        .filter(|(k, _)| !requires_restart(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    live.entry(DISKLESS_SYNC_MAX_REPLICAS.to_string())
        .or_insert_with(|| cluster.replicas.to_string());
    live.entry(DISKLESS_LOAD.to_string())
        .or_insert_with(|| "on-empty-db".to_string());
    live
}

/// `on-empty-db`: a replica with no data (a new one, one that restarted
/// without a volume) loads its full sync straight from the socket instead of
/// writing it to disk in a background thread and loading it from there
/// (Valkey's default, `disabled`); one whose data would be replaced keeps the
/// default's safety. On the testbed the main thread noticed the finished
/// download up to a second late. Live, like [`DISKLESS_SYNC_MAX_REPLICAS`].
pub const DISKLESS_LOAD: &str = "repl-diskless-load";

/// A primary starts a diskless full sync once this many replicas wait for
/// one, instead of after `repl-diskless-sync-delay`: with every replica of
/// the shard (a new cluster, a shard whose replicas all came back), the sync
/// starts at once, a second sooner (measured on valkey-server 9.1.2: both of
/// two replicas linked 0.54 s after REPLICAOF, against 0.54-1.56 s with the
/// delay alone). Live, and not in the file: a change of `spec.replicas` must
/// not restart members (the operator sets it on a new member with its zone).
pub const DISKLESS_SYNC_MAX_REPLICAS: &str = "repl-diskless-sync-max-replicas";

/// The user's keys that only a restart applies; their values are part of the
/// members' restart hash.
pub fn restart_config(cluster: &ValidatedCluster) -> BTreeMap<String, String> {
    cluster
        .config
        .iter()
        .filter(|(k, _)| requires_restart(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A live value in the form CONFIG GET prints it, so comparing it with the
/// member's value does not see a difference where there is none: memory
/// sizes as plain bytes (Valkey reads `1k` = 1000, `1kb` = 1024, `1m`, `1mb`,
/// `1g`, `1gb`, case-insensitively), everything else as written.
pub fn normalized_value(value: &str) -> String {
    let lower = value.trim().to_ascii_lowercase();
    let digits = lower.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return value.to_string();
    }
    let (number, unit) = lower.split_at(digits);
    let factor: u64 = match unit {
        "k" => 1_000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return value.to_string(),
    };
    match number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
    {
        Some(bytes) => bytes.to_string(),
        None => value.to_string(),
    }
}

/// Renders valkey.conf (see the module docs for the order).
pub fn render(cluster: &ValidatedCluster) -> String {
    let mut out = String::new();
    out.push_str("# Rendered by valkey-operator; edit spec.config of the ValkeyCluster instead.\n");
    out.push_str("\n# Defaults (spec.config may override)\n");
    for (k, v) in overridable_defaults(cluster) {
        line(&mut out, k, &v);
    }
    if !cluster.config.is_empty() {
        out.push_str("\n# spec.config\n");
        for (k, v) in &cluster.config {
            line(&mut out, k, v);
        }
    }
    if !cluster.modules.is_empty() {
        // Loaded at start only (loadmodule is no config CONFIG SET knows):
        // the modules are in the members' restart hash.
        out.push_str("\n# spec.modules\n");
        for m in &cluster.modules {
            let mut words = vec![m.path.as_str()];
            words.extend(m.args.iter().map(String::as_str));
            line(&mut out, "loadmodule", &words.join(" "));
        }
    }
    out.push_str("\n# Owned by the operator\n");
    for (k, v) in owned_settings(cluster) {
        line(&mut out, k, &v);
    }
    out
}

/// Whether a member's data survives its restart: a volume, and Valkey
/// writing to it (AOF or RDB snapshots). `persistence` with
/// `spec.config: {appendonly: "no", save: ""}` keeps a volume that nothing
/// is written to: a lone primary restarted there comes back empty, so the
/// safety guards must treat such a cluster as one without persistence.
pub fn durable(cluster: &ValidatedCluster) -> bool {
    if cluster.persistence.is_none() {
        return false;
    }
    let setting = |key: &str| {
        cluster
            .config
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| normalized_value(v))
    };
    let aof = setting("appendonly").is_none_or(|v| v.eq_ignore_ascii_case("yes"));
    // `save ""` (or nothing at all) turns snapshots off.
    let rdb = setting("save").is_none_or(|v| !v.trim().is_empty() && v.trim() != "\"\"");
    aof || rdb
}

/// The operator's defaults, in file order.
fn overridable_defaults(cluster: &ValidatedCluster) -> Vec<(&'static str, String)> {
    let persistent = cluster.persistence.is_some();
    let mut defaults = vec![
        ("appendonly", yes_no(persistent)),
        // Without a volume, snapshots only cost CPU and disk: a restarted pod
        // starts empty anyway and is reseeded by its shard's primary.
        (
            "save",
            if persistent {
                "3600 1 300 100 60 10000".into()
            } else {
                "\"\"".into()
            },
        ),
        // Slots of a shard that lost every member must not take the whole
        // cluster down: the other shards keep serving (clients see CLUSTERDOWN
        // only for the lost slots). Atomic slot migration keeps coverage full
        // during scaling, so full coverage is never needed for correctness.
        ("cluster-require-full-coverage", "no".into()),
        ("shutdown-timeout", SHUTDOWN_TIMEOUT_SECONDS.to_string()),
        // Valkey waits 5 s by default before a diskless full sync so that
        // replicas arriving later share one transfer. The operator attaches a
        // shard's replicas in one go (milliseconds apart), so 1 s catches them
        // all and a new or re-created replica is in sync 4 s sooner.
        ("repl-diskless-sync-delay", "1".into()),
    ];
    if cluster.kind == SetKind::Replication {
        defaults.retain(|(k, _)| !k.starts_with("cluster-"));
    }
    defaults
}

/// The settings the operator owns, in file order.
fn owned_settings(cluster: &ValidatedCluster) -> Vec<(&'static str, String)> {
    let mut owned = vec![("daemonize", "no".into())];
    match &cluster.tls {
        // TLS on the client port, plaintext nowhere; replication and the
        // bus speak TLS too.
        Some(tls) if !tls.switching => {
            owned.extend(tls_wire());
            owned.extend(tls_files());
        }
        // Turned on for a live cluster, until every member runs with the
        // certificates: plaintext as before, the files loaded so that the
        // operator can switch every member at once with [`tls_wire`].
        Some(_) => {
            owned.push(("port", api::constants::VALKEY_PORT.to_string()));
            owned.extend(tls_files());
        }
        None => owned.push(("port", api::constants::VALKEY_PORT.to_string())),
    }
    owned.extend(vec![
        // Every address of the pod (its IP for peers and clients, loopback for
        // the probe); `-::*` makes IPv6 optional.
        ("bind", "* -::*".into()),
        // With a password protected mode does not apply; without one the
        // operator (and clients) connect from outside the pod.
        ("protected-mode", "no".into()),
        ("dir", DATA_DIR.into()),
    ]);
    if cluster.kind == SetKind::Replication {
        owned.extend(replication_settings());
        return owned;
    }
    owned.extend(vec![
        ("cluster-enabled", "yes".into()),
        ("cluster-port", api::constants::CLUSTER_BUS_PORT.to_string()),
        ("cluster-config-file", NODES_CONF.into()),
        ("cluster-node-timeout", CLUSTER_NODE_TIMEOUT_MS.to_string()),
        // The operator owns placement: Valkey must not move replicas to
        // orphaned primaries on its own.
        ("cluster-allow-replica-migration", "no".into()),
        ("cluster-preferred-endpoint-type", "ip".into()),
        // A primary hands its slots to an in-sync replica before it stops.
        ("shutdown-on-sigterm", "failover".into()),
        ("shutdown-on-sigint", "default".into()),
    ]);
    owned
}

/// Where a replication set's member points before the operator tells it
/// which member is the primary: an address where nothing listens (port 1 of
/// the pod's own loopback; no process of a restricted pod may bind it). So
/// every member starts as a replica that is linked to nobody: it refuses
/// writes (`replica-read-only`), and, not linked to a primary, refuses to be
/// the source of a sync (`NOMASTERLINK`). A member that restarts empty can
/// never be written to as a primary, nor hand its emptiness to a replica;
/// only the operator promotes (`REPLICAOF NO ONE`) the member it chose.
pub const REPLICA_OF_NOBODY: (&str, u16) = ("127.0.0.1", 1);

/// The settings a replication set's member owns beyond the common ones.
fn replication_settings() -> Vec<(&'static str, String)> {
    vec![
        (
            "replicaof",
            format!("{} {}", REPLICA_OF_NOBODY.0, REPLICA_OF_NOBODY.1),
        ),
        ("replica-read-only", "yes".into()),
        // A member stopped by Kubernetes saves (with persistence) and exits;
        // the operator promotes the most advanced replica.
        ("shutdown-on-sigterm", "default".into()),
        ("shutdown-on-sigint", "default".into()),
    ]
}

/// The wire of a TLS member: TLS on the client port, plaintext nowhere,
/// replication and the bus over TLS. Valkey 9.1 takes all four live in one
/// CONFIG SET (it closes the plaintext listener, opens the TLS one on the
/// same port and re-opens the bus listener for TLS; checked on
/// valkey-server 9.1.2), which is how a live cluster is switched.
pub fn tls_wire() -> [(&'static str, String); 4] {
    [
        ("port", "0".to_string()),
        ("tls-port", api::constants::VALKEY_PORT.to_string()),
        (TLS_CLUSTER, "yes".into()),
        ("tls-replication", "yes".into()),
    ]
}

/// `tls-cluster`: whether the bus speaks TLS; `yes` on a member that has
/// been switched.
pub const TLS_CLUSTER: &str = "tls-cluster";

/// The certificate files and how clients are checked. Peers present the
/// same certificate as clients of each other; applications need none
/// (`optional`: one they do present must be valid).
fn tls_files() -> [(&'static str, String); 5] {
    [
        (
            "tls-cert-file",
            format!("{TLS_DIR}/{}", api::constants::TLS_CERT_KEY),
        ),
        (
            "tls-key-file",
            format!("{TLS_DIR}/{}", api::constants::TLS_KEY_KEY),
        ),
        (
            "tls-ca-cert-file",
            format!("{TLS_DIR}/{}", api::constants::TLS_CA_KEY),
        ),
        ("tls-auth-clients", "optional".into()),
        ("tls-auto-reload-interval", TLS_RELOAD_SECONDS.to_string()),
    ]
}

fn yes_no(b: bool) -> String {
    if b { "yes".into() } else { "no".into() }
}

fn line(out: &mut String, key: &str, value: &str) {
    let value = if value.is_empty() { "\"\"" } else { value };
    // Writing into a String cannot fail.
    let _ = writeln!(out, "{key} {value}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn persistence_with_aof_and_snapshots_off_is_not_durable() {
        use crate::test_support::{cluster, cluster_with_persistence};
        assert!(!durable(&cluster("c", 1, 0)), "no persistence");
        let mut c = cluster_with_persistence("c", 1, 0, "Delete");
        assert!(durable(&c));
        c.config.insert("appendonly".into(), "no".into());
        assert!(durable(&c), "RDB snapshots still");
        c.config.insert("save".into(), "\"\"".into());
        assert!(!durable(&c), "neither AOF nor RDB");
        c.config.insert("save".into(), "".into());
        assert!(!durable(&c));
        c.config.insert("appendonly".into(), "yes".into());
        assert!(durable(&c));
    }

    use super::*;
    use crate::test_support::cluster;

    #[test]
    fn owned_settings_come_after_user_config_so_they_win() {
        let mut c = cluster("cache", 3, 1);
        c.config
            .insert("maxmemory-policy".into(), "allkeys-lru".into());
        let conf = render(&c);
        let user = conf.find("maxmemory-policy allkeys-lru").unwrap();
        let owned = conf.find("cluster-enabled yes").unwrap();
        assert!(user < owned);
    }

    #[test]
    fn user_config_overrides_the_operator_defaults() {
        let mut c = cluster("cache", 3, 1);
        c.config.insert("appendonly".into(), "yes".into());
        let conf = render(&c);
        let default = conf.find("appendonly no").unwrap();
        let user = conf.find("appendonly yes").unwrap();
        assert!(default < user, "the user's value is read last:\n{conf}");
    }

    #[test]
    fn cluster_settings_the_operator_relies_on_are_rendered() {
        let conf = render(&cluster("cache", 3, 1));
        for expected in [
            "cluster-enabled yes",
            "cluster-config-file /data/nodes.conf",
            "cluster-node-timeout 5000",
            "cluster-allow-replica-migration no",
            "shutdown-on-sigterm failover",
            "shutdown-timeout 10",
            "port 6379",
            "cluster-port 16379",
            "dir /data",
        ] {
            assert!(
                conf.lines().any(|l| l == expected),
                "missing {expected:?} in\n{conf}"
            );
        }
    }

    #[test]
    fn with_tls_the_client_port_bus_and_replication_are_tls_only() {
        let mut c = cluster("cache", 3, 1);
        assert!(render(&c).lines().any(|l| l == "port 6379"));
        c.tls = crate::test_support::operator_tls(false);
        let conf = render(&c);
        for expected in [
            "port 0",
            "tls-port 6379",
            "tls-cluster yes",
            "tls-replication yes",
            "tls-cert-file /etc/valkey-tls/tls.crt",
            "tls-key-file /etc/valkey-tls/tls.key",
            "tls-ca-cert-file /etc/valkey-tls/ca.crt",
            "tls-auth-clients optional",
        ] {
            assert!(
                conf.lines().any(|l| l == expected),
                "missing {expected:?} in\n{conf}"
            );
        }
        assert!(!conf.lines().any(|l| l == "port 6379"));
    }

    #[test]
    fn every_module_is_one_loadmodule_line_with_its_args() {
        let mut c = cluster("cache", 3, 1);
        c.modules = vec![api::v1alpha1::ValidatedModule {
            name: "hello".into(),
            path: "/modules/libhello.so".into(),
            args: vec!["hi".into(), "there".into()],
        }];
        let conf = render(&c);
        assert!(
            conf.lines()
                .any(|l| l == "loadmodule /modules/libhello.so hi there"),
            "{conf}"
        );
    }

    #[test]
    fn while_switching_to_tls_members_load_the_certificates_but_speak_plaintext() {
        let mut c = cluster("cache", 3, 1);
        c.tls = crate::test_support::operator_tls(true);
        let conf = render(&c);
        for expected in [
            "port 6379",
            "tls-cert-file /etc/valkey-tls/tls.crt",
            "tls-key-file /etc/valkey-tls/tls.key",
            "tls-ca-cert-file /etc/valkey-tls/ca.crt",
        ] {
            assert!(
                conf.lines().any(|l| l == expected),
                "missing {expected:?} in\n{conf}"
            );
        }
        for absent in ["port 0", "tls-port", "tls-cluster", "tls-replication"] {
            assert!(
                !conf.lines().any(|l| l.starts_with(absent)),
                "{absent:?} in\n{conf}"
            );
        }
        // The live switch sets what a TLS member's file says.
        let switched = render(&ValidatedCluster {
            tls: c.tls.clone().map(|t| api::v1alpha1::ValidatedTls {
                switching: false,
                ..t
            }),
            ..c
        });
        for (key, value) in tls_wire() {
            let line = format!("{key} {value}");
            assert!(switched.lines().any(|l| l == line), "{line} in\n{switched}");
        }
    }

    #[test]
    fn without_persistence_snapshots_and_aof_are_off() {
        let conf = render(&cluster("cache", 1, 0));
        assert!(conf.lines().any(|l| l == "appendonly no"));
        assert!(conf.lines().any(|l| l == "save \"\""));
    }

    #[test]
    fn an_empty_value_is_rendered_as_an_empty_string() {
        let mut c = cluster("cache", 1, 0);
        c.config
            .insert("notify-keyspace-events".into(), String::new());
        assert!(
            render(&c)
                .lines()
                .any(|l| l == "notify-keyspace-events \"\"")
        );
    }

    #[test]
    fn immutable_keys_need_a_restart_and_the_rest_go_in_live() {
        assert!(requires_restart("databases"));
        assert!(requires_restart("TCP-BACKLOG"));
        assert!(requires_restart("bio_cpulist"));
        assert!(!requires_restart("maxmemory-policy"));
        assert!(!requires_restart("maxmemory"));
        assert!(!requires_restart("io-threads"));
    }

    #[test]
    fn memory_sizes_compare_as_the_bytes_valkey_prints() {
        assert_eq!(normalized_value("100mb"), "104857600");
        assert_eq!(normalized_value("1GB"), "1073741824");
        assert_eq!(normalized_value("10k"), "10000");
        assert_eq!(normalized_value("allkeys-lru"), "allkeys-lru");
        assert_eq!(normalized_value("3600 1 300 100"), "3600 1 300 100");
        assert_eq!(normalized_value("5000"), "5000");
    }

    #[test]
    fn user_config_splits_into_live_and_restart_keys() {
        let mut c = cluster("cache", 1, 0);
        c.config.insert("maxmemory".into(), "100mb".into());
        c.config.insert("databases".into(), "4".into());
        assert_eq!(
            live_config(&c).into_iter().collect::<Vec<_>>(),
            [
                ("maxmemory".to_string(), "100mb".to_string()),
                (DISKLESS_LOAD.to_string(), "on-empty-db".to_string()),
                (DISKLESS_SYNC_MAX_REPLICAS.to_string(), "0".to_string())
            ]
        );
        // The user's value wins.
        c.config
            .insert(DISKLESS_SYNC_MAX_REPLICAS.into(), "3".into());
        assert_eq!(live_config(&c)[DISKLESS_SYNC_MAX_REPLICAS], "3");
        assert_eq!(restart_config(&c).keys().collect::<Vec<_>>(), ["databases"]);
    }
}
