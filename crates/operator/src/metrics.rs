//! Prometheus metrics of the operator, served on `/metrics` (see [`crate::http`]).
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
//! - `valkey_operator_valkey_commands_total{command}`: state-changing Valkey
//!   commands (MEET, ADDSLOTSRANGE, REPLICATE, FAILOVER, FORGET, CONFIG SET...).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
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

/// Label of Valkey commands.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub command: String,
}

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
    pub valkey_commands: Family<CommandLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("valkey_operator");
        let reconciles = Counter::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        // 5 ms .. ~40 s.
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let failovers = Counter::default();
        let slot_migrations = Counter::default();
        let api_writes = Family::<WriteLabels, Counter>::default();
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
            "valkey_commands",
            "State-changing commands sent to Valkey members",
            valkey_commands.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            failovers,
            slot_migrations,
            api_writes,
            valkey_commands,
        }
    }

    /// Counts one finished reconcile.
    pub fn reconciled(&self, took: Duration, error_category: Option<&str>) {
        self.reconciles.inc();
        self.reconcile_duration.observe(took.as_secs_f64());
        if let Some(category) = error_category {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    category: category.to_string(),
                })
                .inc();
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

    /// Counts one state-changing Valkey command.
    pub fn valkey_command(&self, command: &str) {
        self.valkey_commands
            .get_or_create(&CommandLabels {
                command: command.to_string(),
            })
            .inc();
    }

    /// The text exposition format Prometheus scrapes.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exposed_under_the_names_dashboards_use() {
        let m = Metrics::new();
        m.reconciled(Duration::from_millis(20), Some("Kubernetes"));
        m.api_write("StatefulSet", "apply");
        m.failovers.inc();
        m.slot_migrations.inc();
        let text = m.encode();
        for name in [
            "valkey_operator_reconciles_total 1",
            "valkey_operator_reconcile_errors_total{category=\"Kubernetes\"} 1",
            "valkey_operator_reconcile_duration_seconds_count 1",
            "valkey_operator_failovers_total 1",
            "valkey_operator_slot_migrations_total 1",
            "valkey_operator_api_writes_total{kind=\"StatefulSet\",verb=\"apply\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }
}
