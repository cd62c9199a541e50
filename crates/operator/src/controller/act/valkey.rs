//! Act, Valkey side: sends the commands the Valkey planner picked, one at a
//! time over the reconcile's connections, and tells about them in events
//! (one per kind of command).

use crate::controller::Context;
use crate::controller::events::{Events, action_reason, reason};
use crate::controller::memory::Memory;
use crate::controller::valkey_io::{self, Session};
use std::collections::BTreeMap;
use std::time::Instant;
use valkey::actions::Action as VAction;

/// Sends `actions` in order. A failed command is reported and skipped (the
/// next reconcile plans again). Returns the commands sent, but for
/// CONFIG SET (not worth a `lastAction`).
pub async fn execute(
    ctx: &Context,
    session: &Session,
    actions: &[VAction],
    events: &Events<'_>,
    memory: &mut Memory,
    now: Instant,
) -> Vec<String> {
    let mut done: Vec<String> = Vec::new();
    let mut by_kind: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for action in actions {
        let text = action.to_string();
        ctx.metrics.valkey_command(action.kind());
        match valkey_io::execute(session, action, ctx.settings.timeouts).await {
            Ok(()) => {
                tracing::info!(action = %text, "valkey command sent");
                match action {
                    VAction::Failover { on, .. } => {
                        ctx.metrics.failovers.inc();
                        memory.failover_requested.insert(on.shard.0, now);
                    }
                    VAction::MigrateSlots { .. } => {
                        ctx.metrics.slot_migrations.inc();
                    }
                    _ => {}
                }
                by_kind.entry(action.kind()).or_default().push(text.clone());
                if !matches!(action, VAction::ConfigSet { .. }) {
                    done.push(text);
                }
            }
            Err(error) => {
                tracing::warn!(action = %text, %error, "valkey command failed");
                events
                    .warning(
                        reason::VALKEY_COMMAND_FAILED,
                        action.kind(),
                        format!("{text}: {error}"),
                    )
                    .await;
            }
        }
    }
    for (kind, texts) in by_kind {
        let note = if texts.len() <= 4 {
            texts.join("; ")
        } else {
            format!("{}; ... ({} commands)", texts[..3].join("; "), texts.len())
        };
        events.normal(action_reason(kind), kind, note).await;
    }
    done
}
