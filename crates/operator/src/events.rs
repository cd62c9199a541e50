//! Kubernetes Events on the ValkeyCluster for every action a person wants to
//! know about (bootstrap, MEET, failover, slot migration, scale, rolling
//! restart, placement problems, invalid spec). Publishing is best effort: a
//! failed event is logged, never fails the reconcile.

use crate::metrics::Metrics;
pub use decide::notes::{Note, action_reason, reason};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

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
