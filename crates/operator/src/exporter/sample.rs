//! The pure half of the exporter: a member's INFO and CLUSTER INFO replies
//! into a [`Sample`], and a sample (or none: the member did not answer) into
//! the Prometheus exposition, through a registry built for that one scrape.
//!
//! Every name carries the `valkey_` prefix and no cluster, shard or member
//! label: the scraper adds the pod's labels (the chart's member PodMonitor
//! turns `valkey.rs/cluster|shard|member|role` into `cluster`, `shard`,
//! `member`, `role`). Counters are Valkey's own since its start, so they fall
//! to 0 when the member restarts, which `rate()` reads as a counter reset.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use valkey::parse::{ClusterInfo, Info, ParseError, ReplicationInfo, Role};

/// The prefix of every exporter metric.
pub const PREFIX: &str = "valkey";

/// What one member said, in the units the metrics are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// `used_memory`.
    pub memory_used_bytes: u64,
    /// `maxmemory` (0: no limit).
    pub memory_max_bytes: u64,
    /// `connected_clients`.
    pub connected_clients: u64,
    /// `blocked_clients`.
    pub blocked_clients: u64,
    /// `total_commands_processed`.
    pub commands_processed: u64,
    /// `instantaneous_ops_per_sec`: Valkey's own recent average.
    pub ops_per_sec: u64,
    /// `keyspace_hits`, `keyspace_misses`.
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    /// `evicted_keys`: keys dropped by the maxmemory policy.
    pub evicted_keys: u64,
    /// `expired_keys`.
    pub expired_keys: u64,
    /// Keys per database (the keyspace section; empty databases are absent).
    pub keys_by_db: BTreeMap<u32, u64>,
    /// `uptime_in_seconds`.
    pub uptime_seconds: u64,
    pub role: Role,
    /// How far into its replication stream the member is: a primary's
    /// `master_repl_offset`, a replica's `slave_repl_offset` (what it has
    /// applied), so a primary's minus its replica's is the replica's lag.
    pub replication_offset: i64,
    /// `connected_slaves`.
    pub connected_replicas: u32,
    /// A replica's `master_link_status` is `up`; `None` on a primary.
    pub master_link_up: Option<bool>,
    /// A replica's `master_sync_in_progress`; `None` on a primary.
    pub master_sync_in_progress: Option<bool>,
    /// CLUSTER INFO; `None` when the server does not run in cluster mode.
    pub cluster: Option<ClusterInfo>,
}

impl Sample {
    /// The sample of a member's `INFO` (the default sections) and, in
    /// cluster mode, its `CLUSTER INFO`. A field every Valkey prints that is
    /// missing or does not parse is an error naming it.
    pub fn from_replies(info: &Info, cluster: Option<ClusterInfo>) -> Result<Sample, ParseError> {
        let replication = ReplicationInfo::from_info(info)?;
        let link = replication.primary_link.as_ref();
        Ok(Sample {
            memory_used_bytes: info.required("memory", "used_memory")?,
            memory_max_bytes: info.required("memory", "maxmemory")?,
            connected_clients: info.required("clients", "connected_clients")?,
            blocked_clients: info.required("clients", "blocked_clients")?,
            commands_processed: info.required("stats", "total_commands_processed")?,
            ops_per_sec: info.required("stats", "instantaneous_ops_per_sec")?,
            keyspace_hits: info.required("stats", "keyspace_hits")?,
            keyspace_misses: info.required("stats", "keyspace_misses")?,
            evicted_keys: info.required("stats", "evicted_keys")?,
            expired_keys: info.required("stats", "expired_keys")?,
            keys_by_db: info.keys_by_db()?,
            uptime_seconds: info.required("server", "uptime_in_seconds")?,
            role: replication.role,
            replication_offset: link.map_or(replication.repl_offset, |l| l.repl_offset),
            connected_replicas: replication.connected_replicas,
            master_link_up: link.map(|l| l.link_up),
            master_sync_in_progress: link.map(|l| l.sync_in_progress),
            cluster,
        })
    }
}

/// Whether INFO says the server runs in cluster mode (`cluster_enabled:1`),
/// i.e. whether CLUSTER INFO is worth asking.
pub fn cluster_enabled(info: &Info) -> bool {
    info.get("cluster_enabled") == Some("1")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DbLabel {
    db: String,
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn bytes(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register_with_unit(name, help, Unit::Bytes, g);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The registry of one scrape: `valkey_up` alone when the member did not
/// answer (`None`), every family the sample has otherwise. The metrics of a
/// replica's link exist on replicas only, those of CLUSTER INFO in cluster
/// mode only.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn registry(sample: Option<&Sample>) -> Registry {
    let mut r = Registry::with_prefix(PREFIX);
    gauge(
        &mut r,
        "up",
        "1 when the member answered INFO (and CLUSTER INFO) at this scrape",
        i64::from(sample.is_some()),
    );
    let Some(s) = sample else {
        return r;
    };
    bytes(
        &mut r,
        "memory_used",
        "Memory Valkey has allocated (used_memory)",
        signed(s.memory_used_bytes),
    );
    bytes(
        &mut r,
        "memory_max",
        "The maxmemory setting (0: no limit)",
        signed(s.memory_max_bytes),
    );
    gauge(
        &mut r,
        "connected_clients",
        "Client connections, replicas' excluded",
        signed(s.connected_clients),
    );
    gauge(
        &mut r,
        "blocked_clients",
        "Clients waiting in a blocking command",
        signed(s.blocked_clients),
    );
    counter(
        &mut r,
        "commands_processed",
        "Commands the member processed since it started",
        s.commands_processed,
    );
    gauge(
        &mut r,
        "instantaneous_ops_per_second",
        "Commands per second, Valkey's own recent average",
        signed(s.ops_per_sec),
    );
    counter(
        &mut r,
        "keyspace_hits",
        "Key lookups that found the key",
        s.keyspace_hits,
    );
    counter(
        &mut r,
        "keyspace_misses",
        "Key lookups that did not find the key",
        s.keyspace_misses,
    );
    counter(
        &mut r,
        "evicted_keys",
        "Keys evicted by the maxmemory policy",
        s.evicted_keys,
    );
    counter(&mut r, "expired_keys", "Keys that expired", s.expired_keys);
    let keys = Family::<DbLabel, Gauge>::default();
    for (db, n) in &s.keys_by_db {
        keys.get_or_create(&DbLabel { db: db.to_string() })
            .set(signed(*n));
    }
    r.register(
        "keyspace_keys",
        "Keys per database (an empty database has no series)",
        keys,
    );
    gauge(
        &mut r,
        "uptime_seconds",
        "Seconds since the member's valkey-server started",
        signed(s.uptime_seconds),
    );
    gauge(
        &mut r,
        "role_primary",
        "1 on a primary, 0 on a replica",
        i64::from(s.role == Role::Primary),
    );
    bytes(
        &mut r,
        "replication_offset",
        "Replication stream offset: a primary's master_repl_offset, a replica's applied slave_repl_offset",
        s.replication_offset,
    );
    gauge(
        &mut r,
        "connected_replicas",
        "Replicas connected to this member",
        i64::from(s.connected_replicas),
    );
    if let Some(up) = s.master_link_up {
        gauge(
            &mut r,
            "master_link_up",
            "1 while the replica's link to its primary is up (replicas only)",
            i64::from(up),
        );
    }
    if let Some(syncing) = s.master_sync_in_progress {
        gauge(
            &mut r,
            "master_sync_in_progress",
            "1 while the replica loads a full sync from its primary (replicas only)",
            i64::from(syncing),
        );
    }
    if let Some(c) = &s.cluster {
        gauge(
            &mut r,
            "cluster_state_ok",
            "1 while CLUSTER INFO says cluster_state:ok (the member serves queries)",
            i64::from(c.state_ok),
        );
        gauge(
            &mut r,
            "cluster_slots_assigned",
            "Hash slots bound to a node, as this member sees it (16384 when whole)",
            i64::from(c.slots_assigned),
        );
        gauge(
            &mut r,
            "cluster_slots_ok",
            "Hash slots whose node is neither PFAIL nor FAIL, as this member sees it",
            i64::from(c.slots_ok),
        );
        gauge(
            &mut r,
            "cluster_slots_pfail",
            "Hash slots whose node this member cannot reach (PFAIL)",
            i64::from(c.slots_pfail),
        );
        gauge(
            &mut r,
            "cluster_slots_fail",
            "Hash slots whose node the cluster agrees is down (FAIL)",
            i64::from(c.slots_fail),
        );
        gauge(
            &mut r,
            "cluster_known_nodes",
            "Nodes in this member's cluster table",
            i64::from(c.known_nodes),
        );
        gauge(
            &mut r,
            "cluster_size",
            "Primaries serving at least one slot, as this member sees it",
            i64::from(c.size),
        );
    }
    r
}

/// The exposition (OpenMetrics text) of one scrape.
pub fn encode(sample: Option<&Sample>) -> String {
    let mut out = String::new();
    // Encoding into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry(sample));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `INFO` of a replica of a 3x1 cluster with auth, as valkey-server 9.1.2
    /// sent it (only `executable` changed: it named the build's path).
    const REPLICA_INFO: &str = include_str!("testdata/info-replica.txt");
    /// `INFO` of that replica's primary.
    const PRIMARY_INFO: &str = include_str!("testdata/info-primary.txt");
    /// `CLUSTER INFO` of that primary.
    const CLUSTER_INFO: &str = include_str!("testdata/cluster-info.txt");

    fn sample_of(info: &str) -> Sample {
        let cluster = ClusterInfo::parse(CLUSTER_INFO).unwrap();
        Sample::from_replies(&Info::parse(info), Some(cluster)).unwrap()
    }

    /// The value of the sample line `series` (name and labels, as written).
    fn value(text: &str, series: &str) -> Option<String> {
        text.lines().find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(str::to_string)
        })
    }

    #[test]
    fn a_replica_reports_its_link_and_what_it_applied() {
        let info = Info::parse(REPLICA_INFO);
        assert!(cluster_enabled(&info));
        let s = sample_of(REPLICA_INFO);
        assert_eq!(s.role, Role::Replica);
        assert_eq!(s.master_link_up, Some(true));
        assert_eq!(s.master_sync_in_progress, Some(false));
        assert_eq!(
            s.replication_offset,
            info.parsed::<i64>("slave_repl_offset").unwrap().unwrap()
        );
        assert_eq!(s.connected_replicas, 0);
        let text = encode(Some(&s));
        assert_eq!(value(&text, "valkey_up").as_deref(), Some("1"));
        assert_eq!(value(&text, "valkey_role_primary").as_deref(), Some("0"));
        assert_eq!(value(&text, "valkey_master_link_up").as_deref(), Some("1"));
        assert_eq!(
            value(&text, "valkey_cluster_state_ok").as_deref(),
            Some("1")
        );
        assert_eq!(
            value(&text, "valkey_cluster_slots_assigned").as_deref(),
            Some("16384")
        );
        assert_eq!(
            value(&text, "valkey_cluster_slots_ok").as_deref(),
            Some("16384")
        );
        assert_eq!(
            value(&text, "valkey_cluster_known_nodes").as_deref(),
            Some("6")
        );
    }

    #[test]
    fn a_primary_reports_its_replicas_offsets_keys_and_counters() {
        // A second database, as Valkey lists it with `cluster-databases` > 1.
        let eol = if PRIMARY_INFO.contains("\r\n") {
            "\r\n"
        } else {
            "\n"
        };
        let text = PRIMARY_INFO.replace(
            &format!("# Keyspace{eol}"),
            &format!(
                "# Keyspace{eol}db3:keys=7,expires=1,avg_ttl=0,keys_with_volatile_items=0{eol}"
            ),
        );
        let info = Info::parse(&text);
        let s = sample_of(&text);
        assert_eq!(s.role, Role::Primary);
        assert_eq!(s.master_link_up, None);
        assert_eq!(s.connected_replicas, 1);
        assert_eq!(
            s.replication_offset,
            info.parsed::<i64>("master_repl_offset").unwrap().unwrap()
        );
        assert_eq!(s.keys_by_db, BTreeMap::from([(0, 80), (3, 7)]));
        let text = encode(Some(&s));
        assert_eq!(value(&text, "valkey_role_primary").as_deref(), Some("1"));
        assert!(
            !text.contains("valkey_master_link_up"),
            "a primary has no link to a primary: {text}"
        );
        for (db, keys) in &s.keys_by_db {
            assert_eq!(
                value(&text, &format!("valkey_keyspace_keys{{db=\"{db}\"}}")),
                Some(keys.to_string())
            );
        }
        let field = |f: &str| info.get(f).unwrap().to_string();
        assert_eq!(
            value(&text, "valkey_memory_used_bytes"),
            Some(field("used_memory"))
        );
        assert_eq!(
            value(&text, "valkey_memory_max_bytes"),
            Some(field("maxmemory"))
        );
        assert_eq!(
            value(&text, "valkey_connected_clients"),
            Some(field("connected_clients"))
        );
        assert_eq!(
            value(&text, "valkey_commands_processed_total"),
            Some(field("total_commands_processed"))
        );
        assert_eq!(
            value(&text, "valkey_instantaneous_ops_per_second"),
            Some(field("instantaneous_ops_per_sec"))
        );
        assert_eq!(
            value(&text, "valkey_evicted_keys_total"),
            Some(field("evicted_keys"))
        );
        assert_eq!(
            value(&text, "valkey_expired_keys_total"),
            Some(field("expired_keys"))
        );
        assert_eq!(
            value(&text, "valkey_replication_offset_bytes"),
            Some(field("master_repl_offset"))
        );
        assert_eq!(
            value(&text, "valkey_connected_replicas").as_deref(),
            Some("1")
        );
        // Counters and units as Prometheus expects them.
        assert!(
            text.contains("# TYPE valkey_commands_processed counter"),
            "{text}"
        );
        assert!(
            text.contains("# UNIT valkey_memory_used_bytes bytes"),
            "{text}"
        );
    }

    #[test]
    fn a_member_that_does_not_answer_is_up_0_and_nothing_else() {
        let text = encode(None);
        assert_eq!(value(&text, "valkey_up").as_deref(), Some("0"));
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        assert_eq!(samples, ["valkey_up 0"]);
    }

    #[test]
    fn without_cluster_mode_there_are_no_cluster_metrics() {
        let info = Info::parse(&PRIMARY_INFO.replace("cluster_enabled:1", "cluster_enabled:0"));
        assert!(!cluster_enabled(&info));
        let s = Sample::from_replies(&info, None).unwrap();
        let text = encode(Some(&s));
        assert!(!text.contains("valkey_cluster_"), "{text}");
        assert_eq!(value(&text, "valkey_up").as_deref(), Some("1"));
    }

    #[test]
    fn a_field_every_valkey_prints_that_is_missing_is_named() {
        let info = Info::parse(&PRIMARY_INFO.replace("used_memory:", "used_memory_renamed:"));
        assert_eq!(
            Sample::from_replies(&info, None),
            Err(ParseError::MissingInfoField {
                section: "memory",
                field: "used_memory"
            })
        );
        let info = Info::parse(&PRIMARY_INFO.replace("role:master", "role:sentinel"));
        assert!(matches!(
            Sample::from_replies(&info, None),
            Err(ParseError::InfoField { field, .. }) if field == "role"
        ));
    }
}
