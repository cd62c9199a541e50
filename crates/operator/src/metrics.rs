// Over 600 lines: every metric the operator exports, registered and described in one place, and their tests.
//! Prometheus metrics of the operator, served on `/metrics` (see [`crate::http`]).
//!
//! (Over 600 lines on purpose: the list below is the metrics contract the
//! chart's alerts and dashboard rely on, and each family's registration,
//! setter and removal sit together under it; about 200 lines are tests.)
//!
//! All names carry the `valkey_operator_` prefix; counters get `_total`:
//! - `valkey_operator_reconciles_total`
//! - `valkey_operator_reconcile_errors_total{category}`: `category` is the
//!   stable name of the failing step's error ([`crate::controller::Error::category`]);
//! - `valkey_operator_reconcile_duration_seconds` (histogram);
//! - `valkey_operator_failovers_total`: failovers the operator started;
//! - `valkey_operator_slot_migrations_total`: CLUSTER MIGRATESLOTS jobs it started;
//! - `valkey_operator_api_writes_total{kind,verb}`: every create, apply,
//!   patch and delete it sent to the API server. A steady cluster adds zero
//!   per resync: writes happen only when something differs.
//! - `valkey_operator_api_requests_total{verb}`: every request its client
//!   sent to the API server, reads and watches too (`get`, `post`, `patch`,
//!   `put`, `delete`, and `watch` for a GET that opens a watch).
//! - `valkey_operator_valkey_commands_total{command}`: state-changing Valkey
//!   commands (MEET, ADDSLOTSRANGE, REPLICATE, FAILOVER, FORGET, CONFIG SET...).
//! - `valkey_operator_build_info{version}` 1.
//!
//! Per cluster (labels `namespace`, `cluster`), set after every successful
//! reconcile from the status it wrote and the facts behind it
//! ([`crate::controller::report::gauges`]), and removed when the cluster is
//! deleted:
//! - `valkey_operator_cluster_shards{state="desired"|"ready"}`,
//!   `valkey_operator_cluster_members{state="desired"|"ready"}`;
//! - `valkey_operator_cluster_slots_assigned` (of 16384);
//! - `valkey_operator_cluster_condition{condition}`: 1 while the condition is
//!   True (Ready, Progressing, Degraded, TopologySpread,
//!   PrimaryPlacementAligned, Paused), else 0;
//! - `valkey_operator_cluster_last_reconcile_timestamp_seconds`: when a
//!   reconcile of it last succeeded;
//! - `valkey_operator_cluster_reconcile_duration_seconds`: how long its last
//!   reconcile took (failed ones too);
//! - `valkey_operator_cluster_primaries_misplaced`: primaries that could move
//!   to a replica in a better domain now, each judged by primary balancing's
//!   rule with the others where they are (0 exactly when balancing has nothing
//!   to do; counted whatever `primaryBalancing.mode` says; balancing moves one
//!   at a time, so fewer may end up moving);
//! - `valkey_operator_cluster_preferred_spread_violations`: the placement
//!   plan's excess over a Preferred replicaSpreadConstraint, one per shard and
//!   domain over its `maxReplicas` (a Required constraint is never exceeded:
//!   the member is left unplaced instead);
//! - `valkey_operator_cluster_members_unplaced`: members the plan cannot place
//!   (a Required constraint, or no room);
//! - `valkey_operator_cluster_plan_optimal`: 1 when the plan is proven
//!   optimal, 0 when a search limit cut it short or no plan could be made.
//!
//! Per replica (labels `namespace`, `cluster`, `shard`, `member`; a move's new
//! copy of member `m` is `member="m-new"`), for every member that answered as
//! a replica, removed when it no longer does:
//! - `valkey_operator_replica_link_up`: 1 while its `master_link_status` is up;
//! - `valkey_operator_replica_lag_bytes`: the shard's live primary's
//!   `master_repl_offset` minus the replica's `slave_repl_offset` (0 when the
//!   replica reads ahead of the primary's earlier answer); only for a replica
//!   of the shard's live primary.
//!
//! The process (unprefixed, as Prometheus' client libraries name them):
//! `process_resident_memory_bytes`, `process_cpu_seconds_total`,
//! `process_open_fds`, `process_start_time_seconds`, read from /proc on each
//! scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Label of reconcile errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: String,
}

/// Labels of API writes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: String,
    pub verb: String,
}

/// Label of API requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: &'static str,
}

/// The verb of an API request, as `valkey_operator_api_requests_total`
/// labels it: the HTTP method in lower case, `watch` for a GET with
/// `watch=true` (or `watch=1`) in its query.
pub fn request_verb(method: &::http::Method, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    match *method {
        ::http::Method::GET if watch => "watch",
        ::http::Method::GET => "get",
        ::http::Method::POST => "post",
        ::http::Method::PATCH => "patch",
        ::http::Method::PUT => "put",
        ::http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Label of Valkey commands.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub command: String,
}

/// Labels of a cluster's gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub cluster: String,
}

/// Labels of a backup schedule's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScheduleLabels {
    pub namespace: String,
    pub cluster: String,
    pub schedule: String,
}

/// Labels of a count that is either desired or ready.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub namespace: String,
    pub cluster: String,
    pub state: String,
}

/// Labels of a cluster's condition gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub namespace: String,
    pub cluster: String,
    pub condition: String,
}

/// Labels of a replica's gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    pub namespace: String,
    pub cluster: String,
    pub shard: String,
    pub member: String,
}

/// Label of build_info.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

/// What one reconcile tells about a cluster, for its gauges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterGauges {
    pub shards_desired: i64,
    pub shards_ready: i64,
    pub members_desired: i64,
    pub members_ready: i64,
    pub slots_assigned: i64,
    /// (condition type, is True).
    pub conditions: Vec<(String, bool)>,
    /// Primaries that could move to a replica in a better domain now.
    pub primaries_misplaced: i64,
    /// The plan's excess over Preferred constraints (shard and domain pairs).
    pub preferred_spread_violations: i64,
    /// Members the plan cannot place.
    pub members_unplaced: i64,
    /// The plan is proven optimal.
    pub plan_optimal: bool,
    /// Every member that answered as a replica.
    pub replicas: Vec<ReplicaGauges>,
}

/// What one replica said about its replication.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaGauges {
    pub shard: u32,
    /// The member index, `m-new` for a move's new copy of member `m`.
    pub member: String,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// Bytes behind the shard's live primary; `None` when it does not
    /// replicate the live primary (or the shard has none).
    pub lag_bytes: Option<u64>,
}

impl ClusterGauges {
    /// The gauges of a status (`desired`: shards and members per shard the
    /// spec asks for).
    pub fn of(
        shards: u32,
        replicas: u32,
        status: &api::v1alpha1::ValkeyClusterStatus,
    ) -> ClusterGauges {
        let slots = status
            .shards
            .iter()
            .filter_map(|s| s.slots.as_deref())
            .flat_map(|s| s.split(','))
            .filter_map(|range| {
                let (a, b) = range.trim().split_once('-').unwrap_or((range, range));
                let (a, b) = (a.trim().parse::<i64>().ok()?, b.trim().parse::<i64>().ok()?);
                (b >= a).then_some(b - a + 1)
            })
            .sum();
        ClusterGauges {
            shards_desired: i64::from(shards),
            shards_ready: i64::from(status.ready_shards),
            members_desired: i64::from(shards) * (i64::from(replicas) + 1),
            members_ready: status.members.iter().filter(|m| m.ready).count() as i64,
            slots_assigned: slots,
            conditions: conditions_of(status),
            ..ClusterGauges::default()
        }
    }
}

/// (condition type, is True) of every condition of `status`.
pub fn conditions_of(status: &api::v1alpha1::ValkeyClusterStatus) -> Vec<(String, bool)> {
    status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status == "True"))
        .collect()
}

/// The condition types a cluster gauge is kept for (0 while absent).
const CONDITION_TYPES: &[&str] = &[
    api::v1alpha1::CONDITION_READY,
    api::v1alpha1::CONDITION_PROGRESSING,
    api::v1alpha1::CONDITION_DEGRADED,
    api::v1alpha1::CONDITION_TOPOLOGY_SPREAD,
    api::v1alpha1::CONDITION_PRIMARY_PLACEMENT_ALIGNED,
    api::v1alpha1::CONDITION_PAUSED,
];

/// The operator's metrics and the registry that serves them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub reconciles: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub failovers: Counter,
    pub slot_migrations: Counter,
    pub api_writes: Family<WriteLabels, Counter>,
    pub api_requests: Family<RequestLabels, Counter>,
    pub valkey_commands: Family<CommandLabels, Counter>,
    cluster_shards: Family<StateLabels, Gauge>,
    cluster_members: Family<StateLabels, Gauge>,
    cluster_slots: Family<ClusterLabels, Gauge>,
    cluster_conditions: Family<ConditionLabels, Gauge>,
    cluster_last_reconcile: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    cluster_reconcile_duration: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    cluster_primaries_misplaced: Family<ClusterLabels, Gauge>,
    cluster_preferred_violations: Family<ClusterLabels, Gauge>,
    cluster_members_unplaced: Family<ClusterLabels, Gauge>,
    cluster_plan_optimal: Family<ClusterLabels, Gauge>,
    replica_link_up: Family<ReplicaLabels, Gauge>,
    replica_lag: Family<ReplicaLabels, Gauge>,
    backup_last_success: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    backup_last_duration: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    backup_last_size: Family<ClusterLabels, Gauge>,
    backup_schedule_interval: Family<ScheduleLabels, Gauge<f64, AtomicU64>>,
    /// The replica series each cluster has now, so the ones of members that
    /// are gone (or no longer replicas) can be removed.
    replica_series: Mutex<HashMap<ClusterLabels, ReplicaSeries>>,
    /// The clusters that have series (namespace, name): those gone from the
    /// cache are forgotten ([`Metrics::clusters_seen`]).
    seen: Mutex<HashSet<(String, String)>>,
}

/// The label sets of one cluster's replica gauges.
#[derive(Debug, Default)]
struct ReplicaSeries {
    link_up: HashSet<ReplicaLabels>,
    lag: HashSet<ReplicaLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    #[expect(
        clippy::too_many_lines,
        reason = "written before the lint was on; split it when it next changes"
    )]
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let registry = root.sub_registry_with_prefix("valkey_operator");
        let reconciles = Counter::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        // 5 ms .. ~40 s.
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let failovers = Counter::default();
        let slot_migrations = Counter::default();
        let api_writes = Family::<WriteLabels, Counter>::default();
        let api_requests = Family::<RequestLabels, Counter>::default();
        let valkey_commands = Family::<CommandLabels, Counter>::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by the category of the failing step",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took",
            reconcile_duration.clone(),
        );
        registry.register(
            "failovers",
            "Failovers the operator started",
            failovers.clone(),
        );
        registry.register(
            "slot_migrations",
            "Slot migration jobs the operator started",
            slot_migrations.clone(),
        );
        registry.register(
            "api_writes",
            "Writes sent to the Kubernetes API server, by kind and verb",
            api_writes.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the Kubernetes API server (reads, watches and writes), by verb",
            api_requests.clone(),
        );
        registry.register(
            "valkey_commands",
            "State-changing commands sent to Valkey members",
            valkey_commands.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        registry.register(
            "build_info",
            "The operator's version (always 1)",
            build_info,
        );
        let cluster_shards = Family::<StateLabels, Gauge>::default();
        let cluster_members = Family::<StateLabels, Gauge>::default();
        let cluster_slots = Family::<ClusterLabels, Gauge>::default();
        let cluster_conditions = Family::<ConditionLabels, Gauge>::default();
        let cluster_last_reconcile = Family::<ClusterLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "cluster_shards",
            "Shards of a ValkeyCluster: desired (spec) and ready (serving, every member in sync)",
            cluster_shards.clone(),
        );
        registry.register(
            "cluster_members",
            "Members of a ValkeyCluster: desired (spec) and ready",
            cluster_members.clone(),
        );
        registry.register(
            "cluster_slots_assigned",
            "Hash slots (of 16384) the shards of the ValkeyCluster serve",
            cluster_slots.clone(),
        );
        registry.register(
            "cluster_condition",
            "1 while the ValkeyCluster's condition is True, else 0",
            cluster_conditions.clone(),
        );
        registry.register(
            "cluster_last_reconcile_timestamp_seconds",
            "Unix time of the ValkeyCluster's last successful reconcile",
            cluster_last_reconcile.clone(),
        );
        let cluster_reconcile_duration = Family::<ClusterLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "cluster_reconcile_duration_seconds",
            "Time the ValkeyCluster's last reconcile took, failed or not",
            cluster_reconcile_duration.clone(),
        );
        let cluster_primaries_misplaced = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "cluster_primaries_misplaced",
            "Primaries that could move to a replica in a better domain now, by primary balancing's rule",
            cluster_primaries_misplaced.clone(),
        );
        let cluster_preferred_violations = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "cluster_preferred_spread_violations",
            "Shard and domain pairs where the placement plan exceeds a Preferred replicaSpreadConstraint",
            cluster_preferred_violations.clone(),
        );
        let cluster_members_unplaced = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "cluster_members_unplaced",
            "Members the placement plan cannot place (a Required replicaSpreadConstraint, or no room)",
            cluster_members_unplaced.clone(),
        );
        let cluster_plan_optimal = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "cluster_plan_optimal",
            "1 when the placement plan is proven optimal, 0 when a search limit cut it short or there is none",
            cluster_plan_optimal.clone(),
        );
        let replica_link_up = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "replica_link_up",
            "1 while the replica's link to its primary is up (master_link_status), else 0",
            replica_link_up.clone(),
        );
        let replica_lag = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "replica_lag_bytes",
            "Bytes of the replication stream the replica has not yet received from the shard's live primary",
            replica_lag.clone(),
        );
        let backup_last_success = Family::<ClusterLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the newest Completed ValkeyBackup of the cluster completed (Unix seconds)",
            backup_last_success.clone(),
        );
        let backup_last_duration = Family::<ClusterLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "backup_last_duration_seconds",
            "How long the newest Completed ValkeyBackup of the cluster took, from its Job's creation",
            backup_last_duration.clone(),
        );
        let backup_last_size = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "backup_last_size_bytes",
            "Bytes of RDB the newest Completed ValkeyBackup of the cluster wrote, all shards",
            backup_last_size.clone(),
        );
        let backup_schedule_interval = Family::<ScheduleLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "backup_schedule_interval_seconds",
            "Seconds between two runs of a ValkeyBackupSchedule (its next two), for the backup-age alert",
            backup_schedule_interval.clone(),
        );
        Self {
            registry: root,
            backup_last_success,
            backup_last_duration,
            backup_last_size,
            backup_schedule_interval,
            cluster_shards,
            cluster_members,
            cluster_slots,
            cluster_conditions,
            cluster_last_reconcile,
            cluster_reconcile_duration,
            cluster_primaries_misplaced,
            cluster_preferred_violations,
            cluster_members_unplaced,
            cluster_plan_optimal,
            replica_link_up,
            replica_lag,
            replica_series: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashSet::new()),
            reconciles,
            reconcile_errors,
            reconcile_duration,
            failovers,
            slot_migrations,
            api_writes,
            api_requests,
            valkey_commands,
        }
    }

    /// Counts one finished reconcile of cluster `namespace/cluster`.
    pub fn reconciled(
        &self,
        namespace: &str,
        cluster: &str,
        took: Duration,
        error_category: Option<&str>,
    ) {
        self.reconciles.inc();
        self.reconcile_duration.observe(took.as_secs_f64());
        self.cluster_reconcile_duration
            .get_or_create(&ClusterLabels {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
            })
            .set(took.as_secs_f64());
        if let Some(category) = error_category {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    category: category.to_string(),
                })
                .inc();
        }
    }

    /// Starts the reconcile error counter of each of `categories` at 0
    /// (see [`crate::controller::Error::CATEGORIES`]).
    pub fn count_errors_from_zero(&self, categories: &[&str]) {
        for category in categories {
            let _ = self.reconcile_errors.get_or_create(&ErrorLabels {
                category: category.to_string(),
            });
        }
    }

    /// Counts one write to the API server.
    pub fn api_write(&self, kind: &str, verb: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                kind: kind.to_string(),
                verb: verb.to_string(),
            })
            .inc();
    }

    /// Counts one request to the API server.
    pub fn api_request(&self, method: &::http::Method, query: Option<&str>) {
        self.api_requests
            .get_or_create(&RequestLabels {
                verb: request_verb(method, query),
            })
            .inc();
    }

    /// Counts one state-changing Valkey command.
    pub fn valkey_command(&self, command: &str) {
        self.valkey_commands
            .get_or_create(&CommandLabels {
                command: command.to_string(),
            })
            .inc();
    }

    /// Sets the gauges of cluster `namespace/cluster` after a successful
    /// reconcile, and removes the replica series of members that no longer
    /// answer as replicas.
    pub fn observe_cluster(&self, namespace: &str, cluster: &str, g: &ClusterGauges) {
        let labels = ClusterLabels {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        let state = |state: &str| StateLabels {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
            state: state.to_string(),
        };
        self.cluster_shards
            .get_or_create(&state("desired"))
            .set(g.shards_desired);
        self.cluster_shards
            .get_or_create(&state("ready"))
            .set(g.shards_ready);
        self.cluster_members
            .get_or_create(&state("desired"))
            .set(g.members_desired);
        self.cluster_members
            .get_or_create(&state("ready"))
            .set(g.members_ready);
        self.cluster_slots
            .get_or_create(&labels)
            .set(g.slots_assigned);
        self.observe_conditions(namespace, cluster, &g.conditions);
        self.cluster_primaries_misplaced
            .get_or_create(&labels)
            .set(g.primaries_misplaced);
        self.cluster_preferred_violations
            .get_or_create(&labels)
            .set(g.preferred_spread_violations);
        self.cluster_members_unplaced
            .get_or_create(&labels)
            .set(g.members_unplaced);
        self.cluster_plan_optimal
            .get_or_create(&labels)
            .set(i64::from(g.plan_optimal));
        self.observe_replicas(&labels, &g.replicas);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.cluster_last_reconcile.get_or_create(&labels).set(now);
    }

    /// Sets the condition gauges of cluster `namespace/cluster` from
    /// (condition type, is True) pairs; a type not listed is 0. Also called
    /// for a paused cluster and an invalid spec, whose reconcile stops early.
    pub fn observe_conditions(
        &self,
        namespace: &str,
        cluster: &str,
        conditions: &[(String, bool)],
    ) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert((namespace.to_string(), cluster.to_string()));
        }
        for t in CONDITION_TYPES {
            let on = conditions.iter().any(|(c, v)| c == t && *v);
            self.cluster_conditions
                .get_or_create(&ConditionLabels {
                    namespace: namespace.to_string(),
                    cluster: cluster.to_string(),
                    condition: (*t).to_string(),
                })
                .set(i64::from(on));
        }
    }

    fn observe_replicas(&self, cluster: &ClusterLabels, replicas: &[ReplicaGauges]) {
        let mut now = ReplicaSeries::default();
        for r in replicas {
            let labels = ReplicaLabels {
                namespace: cluster.namespace.clone(),
                cluster: cluster.cluster.clone(),
                shard: r.shard.to_string(),
                member: r.member.clone(),
            };
            self.replica_link_up
                .get_or_create(&labels)
                .set(i64::from(r.link_up));
            if let Some(lag) = r.lag_bytes {
                self.replica_lag
                    .get_or_create(&labels)
                    .set(i64::try_from(lag).unwrap_or(i64::MAX));
                now.lag.insert(labels.clone());
            }
            now.link_up.insert(labels);
        }
        // Reconciles of one cluster never overlap, so what the map holds is
        // what the last one set.
        let Ok(mut series) = self.replica_series.lock() else {
            return;
        };
        if let Some(before) = series.get(cluster) {
            for gone in before.link_up.difference(&now.link_up) {
                self.replica_link_up.remove(gone);
            }
            for gone in before.lag.difference(&now.lag) {
                self.replica_lag.remove(gone);
            }
        }
        series.insert(cluster.clone(), now);
    }

    /// The clusters that have series now, as (namespace, name).
    pub fn clusters_seen(&self) -> Vec<(String, String)> {
        self.seen
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A Completed backup of `cluster`: the backup gauges take it when it
    /// completed no earlier than the one they show (backups are reconciled
    /// in any order after a restart).
    pub fn backup_completed(
        &self,
        namespace: &str,
        cluster: &str,
        completed_unix: f64,
        duration_seconds: f64,
        size_bytes: u64,
    ) {
        let labels = ClusterLabels {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        let last = self.backup_last_success.get_or_create(&labels);
        if completed_unix < last.get() {
            return;
        }
        last.set(completed_unix);
        self.backup_last_duration
            .get_or_create(&labels)
            .set(duration_seconds);
        self.backup_last_size
            .get_or_create(&labels)
            .set(i64::try_from(size_bytes).unwrap_or(i64::MAX));
    }

    /// A schedule's interval, or `None` to drop its series (suspended,
    /// invalid or deleted).
    pub fn backup_schedule(
        &self,
        namespace: &str,
        cluster: &str,
        schedule: &str,
        interval_seconds: Option<f64>,
    ) {
        let labels = ScheduleLabels {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
            schedule: schedule.to_string(),
        };
        match interval_seconds {
            Some(s) => {
                self.backup_schedule_interval.get_or_create(&labels).set(s);
            }
            None => {
                self.backup_schedule_interval.remove(&labels);
            }
        }
    }

    /// Drops every series of a deleted cluster.
    pub fn forget_cluster(&self, namespace: &str, cluster: &str) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.remove(&(namespace.to_string(), cluster.to_string()));
        }
        let labels = ClusterLabels {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        for state in ["desired", "ready"] {
            let l = StateLabels {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
                state: state.to_string(),
            };
            self.cluster_shards.remove(&l);
            self.cluster_members.remove(&l);
        }
        for family in [
            &self.cluster_slots,
            &self.cluster_primaries_misplaced,
            &self.cluster_preferred_violations,
            &self.cluster_members_unplaced,
            &self.cluster_plan_optimal,
        ] {
            family.remove(&labels);
        }
        self.cluster_last_reconcile.remove(&labels);
        self.cluster_reconcile_duration.remove(&labels);
        for t in CONDITION_TYPES {
            self.cluster_conditions.remove(&ConditionLabels {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
                condition: (*t).to_string(),
            });
        }
        let gone = self
            .replica_series
            .lock()
            .ok()
            .and_then(|mut series| series.remove(&labels));
        if let Some(gone) = gone {
            for l in &gone.link_up {
                self.replica_link_up.remove(l);
            }
            for l in &gone.lag {
                self.replica_lag.remove(l);
            }
        }
    }

    /// The text exposition format Prometheus scrapes.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `process_*` metrics of this process, read from /proc on each scrape
/// (nothing is exported where /proc is not there).
#[derive(Debug, Default)]
struct ProcessCollector;

/// What /proc says about this process.
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    rss_bytes: u64,
    cpu_seconds: f64,
    open_fds: u64,
    start_time_seconds: f64,
}

impl ProcessStats {
    fn read() -> Option<ProcessStats> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let mut stats = parse_proc(&status, &stat, &uptime)?;
        stats.open_fds = open_fds;
        Some(stats)
    }
}

/// Clock ticks per second of /proc/*/stat times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// RSS from `status`; CPU time and start time from `stat` (fields 14, 15
/// and 22, counted after the command name) and the system's uptime.
fn parse_proc(status: &str, stat: &str, uptime: &str) -> Option<ProcessStats> {
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // after_comm starts at field 3 (state).
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let cpu_ticks = field(14)? + field(15)?;
    let start_ticks = field(22)?;
    let uptime_s: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some(ProcessStats {
        rss_bytes: rss_kb * 1024,
        cpu_seconds: cpu_ticks / TICKS_PER_SECOND,
        open_fds: 0,
        start_time_seconds: now - uptime_s + start_ticks / TICKS_PER_SECOND,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = ProcessStats::read() else {
            return Ok(());
        };
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.rss_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                p.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_labelled_by_its_verb_and_a_watch_is_told_apart() {
        use ::http::Method;
        assert_eq!(request_verb(&Method::GET, None), "get");
        assert_eq!(request_verb(&Method::GET, Some("labelSelector=a")), "get");
        assert_eq!(
            request_verb(
                &Method::GET,
                Some("labelSelector=a&watch=true&resourceVersion=1")
            ),
            "watch"
        );
        assert_eq!(request_verb(&Method::GET, Some("watch=1")), "watch");
        assert_eq!(
            request_verb(&Method::GET, Some("allowWatchBookmarks=true")),
            "get"
        );
        assert_eq!(
            request_verb(&Method::PATCH, Some("fieldManager=x")),
            "patch"
        );
        assert_eq!(request_verb(&Method::DELETE, None), "delete");
        let m = Metrics::new();
        m.api_request(&Method::GET, Some("watch=true"));
        assert!(
            m.encode()
                .contains("valkey_operator_api_requests_total{verb=\"watch\"} 1")
        );
    }

    #[test]
    fn metrics_are_exposed_under_the_names_dashboards_use() {
        let m = Metrics::new();
        m.reconciled("ns", "c", Duration::from_millis(20), Some("Kubernetes"));
        m.api_write("StatefulSet", "apply");
        m.failovers.inc();
        m.slot_migrations.inc();
        let text = m.encode();
        for name in [
            "valkey_operator_reconciles_total 1",
            "valkey_operator_reconcile_errors_total{category=\"Kubernetes\"} 1",
            "valkey_operator_reconcile_duration_seconds_count 1",
            "valkey_operator_cluster_reconcile_duration_seconds{namespace=\"ns\",cluster=\"c\"} 0.02",
            "valkey_operator_failovers_total 1",
            "valkey_operator_slot_migrations_total 1",
            "valkey_operator_api_writes_total{kind=\"StatefulSet\",verb=\"apply\"} 1",
            "valkey_operator_build_info{version=",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }

    #[test]
    fn every_error_category_is_exported_at_zero_before_its_first_error() {
        let m = Metrics::new();
        m.count_errors_from_zero(&["Tls", "StatusUpdate"]);
        m.reconciled("ns", "c", Duration::from_millis(1), Some("Tls"));
        let text = m.encode();
        assert!(
            text.contains("valkey_operator_reconcile_errors_total{category=\"StatusUpdate\"} 0\n")
        );
        assert!(text.contains("valkey_operator_reconcile_errors_total{category=\"Tls\"} 1\n"));
    }

    #[test]
    fn a_cluster_has_gauges_until_it_is_forgotten() {
        use api::v1alpha1::{ShardStatus, ValkeyClusterStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let status = ValkeyClusterStatus {
            ready_shards: 2,
            shards: vec![
                ShardStatus {
                    index: 0,
                    slots: Some("0-5460".into()),
                    primary: Some(0),
                },
                ShardStatus {
                    index: 1,
                    slots: Some("5461-10922,16000".into()),
                    primary: Some(0),
                },
            ],
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "ClusterReady".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }],
            ..Default::default()
        };
        let g = ClusterGauges::of(3, 1, &status);
        assert_eq!(g.slots_assigned, 5461 + 5462 + 1);
        assert_eq!(g.members_desired, 6);
        let m = Metrics::new();
        m.observe_cluster("ns", "c", &g);
        let text = m.encode();
        for line in [
            "valkey_operator_cluster_shards{namespace=\"ns\",cluster=\"c\",state=\"desired\"} 3",
            "valkey_operator_cluster_shards{namespace=\"ns\",cluster=\"c\",state=\"ready\"} 2",
            "valkey_operator_cluster_slots_assigned{namespace=\"ns\",cluster=\"c\"} 10924",
            "valkey_operator_cluster_condition{namespace=\"ns\",cluster=\"c\",condition=\"Ready\"} 1",
            "valkey_operator_cluster_condition{namespace=\"ns\",cluster=\"c\",condition=\"Paused\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.forget_cluster("ns", "c");
        assert!(!m.encode().contains("cluster=\"c\""));
    }

    fn replica(shard: u32, member: &str, link_up: bool, lag_bytes: Option<u64>) -> ReplicaGauges {
        ReplicaGauges {
            shard,
            member: member.into(),
            link_up,
            lag_bytes,
        }
    }

    #[test]
    fn placement_and_replica_gauges_are_set_and_forgotten_with_the_cluster() {
        let g = ClusterGauges {
            primaries_misplaced: 2,
            preferred_spread_violations: 1,
            members_unplaced: 3,
            plan_optimal: false,
            replicas: vec![
                replica(0, "1", true, Some(120)),
                replica(1, "2-new", false, None),
            ],
            ..ClusterGauges::default()
        };
        let m = Metrics::new();
        m.observe_cluster("ns", "c", &g);
        m.observe_cluster("ns", "other", &ClusterGauges::default());
        let text = m.encode();
        for line in [
            "valkey_operator_cluster_primaries_misplaced{namespace=\"ns\",cluster=\"c\"} 2",
            "valkey_operator_cluster_preferred_spread_violations{namespace=\"ns\",cluster=\"c\"} 1",
            "valkey_operator_cluster_members_unplaced{namespace=\"ns\",cluster=\"c\"} 3",
            "valkey_operator_cluster_plan_optimal{namespace=\"ns\",cluster=\"c\"} 0",
            "valkey_operator_replica_link_up{namespace=\"ns\",cluster=\"c\",shard=\"0\",member=\"1\"} 1",
            "valkey_operator_replica_lag_bytes{namespace=\"ns\",cluster=\"c\",shard=\"0\",member=\"1\"} 120",
            "valkey_operator_replica_link_up{namespace=\"ns\",cluster=\"c\",shard=\"1\",member=\"2-new\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // No lag where it cannot be told.
        assert!(!text.contains(
            "valkey_operator_replica_lag_bytes{namespace=\"ns\",cluster=\"c\",shard=\"1\""
        ));
        m.forget_cluster("ns", "c");
        let text = m.encode();
        assert!(!text.contains("cluster=\"c\""), "{text}");
        assert!(text.contains(
            "valkey_operator_cluster_plan_optimal{namespace=\"ns\",cluster=\"other\"} 0"
        ));
    }

    #[test]
    fn series_of_replicas_that_are_gone_are_removed_and_the_rest_kept() {
        let m = Metrics::new();
        let with = |replicas| ClusterGauges {
            replicas,
            ..ClusterGauges::default()
        };
        m.observe_cluster(
            "ns",
            "c",
            &with(vec![
                replica(0, "1", true, Some(5)),
                replica(0, "2", true, Some(7)),
                replica(1, "1", true, Some(0)),
            ]),
        );
        // Member 0/2 is gone, 1/1 no longer follows the live primary, 0/1 stays.
        m.observe_cluster(
            "ns",
            "c",
            &with(vec![
                replica(0, "1", true, Some(9)),
                replica(1, "1", false, None),
            ]),
        );
        let text = m.encode();
        let series = |name: &str| -> Vec<&str> {
            text.lines()
                .filter(|l| l.starts_with(&format!("valkey_operator_{name}{{")))
                .collect()
        };
        assert_eq!(
            series("replica_lag_bytes"),
            [
                "valkey_operator_replica_lag_bytes{namespace=\"ns\",cluster=\"c\",shard=\"0\",member=\"1\"} 9"
            ]
        );
        let mut links = series("replica_link_up");
        links.sort();
        assert_eq!(
            links,
            [
                "valkey_operator_replica_link_up{namespace=\"ns\",cluster=\"c\",shard=\"0\",member=\"1\"} 1",
                "valkey_operator_replica_link_up{namespace=\"ns\",cluster=\"c\",shard=\"1\",member=\"1\"} 0",
            ]
        );
    }

    #[test]
    fn a_paused_cluster_shows_its_paused_condition() {
        let m = Metrics::new();
        m.observe_conditions("ns", "c", &[("Paused".to_string(), true)]);
        let text = m.encode();
        assert!(text.contains(
            "valkey_operator_cluster_condition{namespace=\"ns\",cluster=\"c\",condition=\"Paused\"} 1"
        ));
        assert!(text.contains(
            "valkey_operator_cluster_condition{namespace=\"ns\",cluster=\"c\",condition=\"Ready\"} 0"
        ));
    }

    #[test]
    fn proc_files_give_rss_cpu_and_start_time() {
        let status = "Name:\tx\nVmRSS:\t   2048 kB\n";
        // pid (comm with ) and spaces) state ppid ... utime=field14 stime=field15 ... starttime=field22
        let mut fields: Vec<String> = (3..=22).map(|_| "0".to_string()).collect();
        fields[14 - 3] = "150".into();
        fields[15 - 3] = "50".into();
        fields[22 - 3] = "1000".into();
        let stat = format!("42 (a) b) {}", fields.join(" "));
        let p = parse_proc(status, &stat, "20.00 1.0").unwrap();
        assert_eq!(p.rss_bytes, 2048 * 1024);
        assert!((p.cpu_seconds - 2.0).abs() < 1e-9);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!((p.start_time_seconds - (now - 10.0)).abs() < 2.0);
    }
}
