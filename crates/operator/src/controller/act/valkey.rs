//! Act, Valkey side: sends the commands the Valkey planner picked over the
//! reconcile's connections, and tells about them in events (one per kind of
//! command).
//!
//! A plan goes out in steps, one after the other: a step is a run of
//! commands of one kind. The planner sorts a plan by kind (membership, then
//! slots, replication, settings, the moves last; `Action`'s rank), and that
//! order is all it promises across members: a node is forgotten everywhere
//! before one is met, a failover has ended before slots move. Within a step
//! the members get their commands concurrently, at most [`IN_FLIGHT`] at a
//! time, each member its own in the plan's order over its one connection.
//! Failovers alone stay one at a time, as they were: each waits until its
//! replica says it is the primary, and several are planned only as
//! TAKEOVERs when most primaries are lost, each taking an epoch without a
//! vote; nothing is gained by racing them.
//! Sent one at a time, a 40x2 cluster's 40 ADDSLOTSRANGE took 23 s (issue
//! 26: 0.1-2 s each on a loaded host), REPLICATE likewise; sent this way on
//! a host that is not saturated, 0.04-0.17 s (docs/benchmarks.md).

use crate::context::Context;
use crate::controller::valkey_io::{self, Session};
use crate::events::{Events, action_reason, reason};
use decide::memory::Memory;
use futures::StreamExt as _;
use std::collections::BTreeMap;
use std::time::Instant;
use valkey::actions::Action as VAction;
use valkey::model::MemberRef;

/// Members sent a command at once. Enough for a 40-shard cluster's slots to
/// go out in three rounds; few enough that a big plan does not make every
/// member save its config and gossip at the same instant on a small host.
const IN_FLIGHT: usize = 16;

/// One member's commands of a step: indices into the plan, in its order.
type Lane = Vec<usize>;

/// The plan cut into steps (runs of one kind, in order; a failover a step
/// of its own), each step into lanes (one per member, in the order of its
/// first command).
fn steps(actions: &[VAction]) -> Vec<Vec<Lane>> {
    let mut steps: Vec<Vec<Lane>> = Vec::new();
    let mut kind = None;
    let mut lane_of: BTreeMap<MemberRef, usize> = BTreeMap::new();
    for (i, action) in actions.iter().enumerate() {
        let alone = matches!(action, VAction::Failover { .. });
        if kind != Some(action.kind()) || alone {
            kind = Some(action.kind());
            lane_of.clear();
            steps.push(Vec::new());
        }
        let Some(step) = steps.last_mut() else {
            continue;
        };
        match lane_of.get(&action.on()).and_then(|&l| step.get_mut(l)) {
            Some(lane) => lane.push(i),
            None => {
                lane_of.insert(action.on(), step.len());
                step.push(vec![i]);
            }
        }
    }
    steps
}

/// Sends `actions` (see the module doc for the order). A failed command is
/// reported and skipped (the next reconcile plans again). Events, metrics
/// and the answer follow the plan's order, whatever order the replies came
/// in. Returns the commands sent, but for CONFIG SET (not worth a
/// `lastAction`).
pub async fn execute(
    ctx: &Context,
    session: &Session,
    actions: &[VAction],
    events: &Events<'_>,
    memory: &mut Memory,
    now: Instant,
) -> Vec<String> {
    let timeouts = ctx.settings.timeouts;
    let started = Instant::now();
    let steps = steps(actions);
    let step_count = steps.len();
    let mut replies: Vec<(usize, Result<(), String>)> = Vec::with_capacity(actions.len());
    for step in steps {
        let step_replies: Vec<Vec<(usize, Result<(), String>)>> = futures::stream::iter(step)
            .map(|lane| async move {
                let mut out = Vec::with_capacity(lane.len());
                for i in lane {
                    if let Some(action) = actions.get(i) {
                        out.push((i, valkey_io::execute(session, action, timeouts).await));
                    }
                }
                out
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        replies.extend(step_replies.into_iter().flatten());
    }
    if !actions.is_empty() {
        tracing::debug!(
            commands = actions.len(),
            steps = step_count,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "valkey commands of the plan sent"
        );
    }
    replies.sort_by_key(|(i, _)| *i);

    let mut done: Vec<String> = Vec::new();
    let mut by_kind: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (i, reply) in replies {
        let Some(action) = actions.get(i) else {
            continue;
        };
        let text = action.to_string();
        ctx.metrics.valkey_command(action.kind());
        match reply {
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

#[cfg(test)]
mod tests {
    use super::steps;
    use std::net::{IpAddr, Ipv4Addr};
    use valkey::actions::{Action, FailoverMode};
    use valkey::model::MemberRef;
    use valkey::slots::SlotSet;

    fn meet(on: MemberRef, last: u8) -> Action {
        Action::Meet {
            on,
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
            port: 6379,
            bus_port: 16379,
        }
    }

    fn add_slots(on: MemberRef) -> Action {
        Action::AddSlotsRange {
            on,
            ranges: SlotSet::new(),
        }
    }

    fn config(on: MemberRef, key: &str) -> Action {
        Action::ConfigSet {
            on,
            key: key.into(),
            value: "x".into(),
        }
    }

    #[test]
    fn one_members_commands_stay_in_one_lane_in_the_plans_order() {
        let anchor = MemberRef::new(0, 0);
        let plan = [meet(anchor, 1), meet(anchor, 2), meet(anchor, 3)];
        assert_eq!(steps(&plan), vec![vec![vec![0, 1, 2]]]);
    }

    #[test]
    fn members_of_one_step_get_a_lane_each_in_order_of_first_command() {
        let (a, b, c) = (
            MemberRef::new(2, 0),
            MemberRef::new(0, 0),
            MemberRef::new(1, 0),
        );
        let plan = [
            config(a, "k1"),
            config(b, "k1"),
            config(a, "k2"),
            config(c, "k1"),
            config(b, "k2"),
        ];
        assert_eq!(steps(&plan), vec![vec![vec![0, 2], vec![1, 4], vec![3]]]);
    }

    #[test]
    fn a_new_kind_starts_a_new_step_even_for_the_same_members() {
        let (a, b) = (MemberRef::new(0, 0), MemberRef::new(1, 0));
        let plan = [
            meet(a, 2),
            add_slots(a),
            add_slots(b),
            config(b, "k"),
            config(a, "k"),
        ];
        assert_eq!(
            steps(&plan),
            vec![
                vec![vec![0]],
                vec![vec![1], vec![2]],
                vec![vec![3], vec![4]]
            ]
        );
    }

    #[test]
    fn failovers_go_one_at_a_time() {
        let takeover = |on| Action::Failover {
            on,
            mode: FailoverMode::Takeover,
        };
        let (a, b) = (MemberRef::new(0, 1), MemberRef::new(1, 1));
        let plan = [takeover(a), takeover(b), add_slots(a)];
        assert_eq!(
            steps(&plan),
            vec![vec![vec![0]], vec![vec![1]], vec![vec![2]]]
        );
    }

    #[test]
    fn every_command_is_in_exactly_one_lane() {
        let plan: Vec<Action> = (0..40)
            .map(|s| add_slots(MemberRef::new(s, 0)))
            .chain((0..40).flat_map(|s| [1, 2].map(|m| config(MemberRef::new(s, m), "k"))))
            .collect();
        let steps = steps(&plan);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].len(), 40);
        assert_eq!(steps[1].len(), 80);
        let mut all: Vec<usize> = steps.into_iter().flatten().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..plan.len()).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_plan_has_no_step() {
        assert!(steps(&[]).is_empty());
    }
}
