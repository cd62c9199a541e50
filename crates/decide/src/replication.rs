//! A replication set's decisions (`ValkeyReplication`: one primary and its
//! replicas, no cluster mode): which member is the primary, when the
//! operator fails over and to whom, which members to point at the primary,
//! the role labels the Services select on, and what the status says.
//!
//! Every member starts as a replica of nobody (`resources::config::REPLICA_OF_NOBODY`):
//! read-only, and no source of a sync. Only this module makes a primary, so
//! the guarantees are here:
//!
//! - **one primary label**: the label comes off a primary that lost its
//!   place before another member is promoted ([`Plan::unlabel`] runs first),
//!   and goes on only to the member just promoted or seen serving as the
//!   primary;
//! - **the most advanced replica wins**: a lost primary is replaced by the
//!   answering member with the highest replication offset (the primary zone
//!   and the lowest index only break ties), so with `WAIT 1` and one failure
//!   at a time no acknowledged write is lost;
//! - **a returning primary is a replica**: a member that restarted (same or
//!   new pod) comes back a replica of nobody and is pointed at the primary;
//!   one that still says it is a primary beside the labelled one is demoted.

use std::collections::BTreeMap;
use std::time::Duration;

/// How long a primary whose pod and node look fine may not answer before the
/// operator fails over (a pod deleted, a node NotReady or a server that
/// restarted as a replica need no wait).
pub const UNANSWERED_FAILOVER_AFTER: Duration = Duration::from_secs(5);

/// Requeue while the set converges (a failover, a replica syncing).
pub const FAST_REQUEUE: Duration = Duration::from_secs(1);
/// Requeue of a steady set: how often the operator looks at the members
/// between events (a server that stops answering has no event).
pub const STEADY_REQUEUE: Duration = Duration::from_secs(2);

/// What Valkey said of one member (INFO replication).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The member says it is a primary.
    pub primary: bool,
    /// A replica's primary (`master_host`, `master_port`).
    pub following: Option<(String, u16)>,
    /// A replica's link to that primary is up (and no full sync runs).
    pub link_up: bool,
    /// `master_repl_offset`: how far into the set's history the member is.
    pub offset: i64,
}

/// One member of the set as observe saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberFacts {
    pub member: u32,
    /// Its pod's name, when the pod exists.
    pub pod: Option<String>,
    pub ip: Option<String>,
    /// The pod is Ready (its probe answers).
    pub pod_ready: bool,
    /// The pod is being deleted.
    pub deleting: bool,
    /// The pod's node, and whether that node is Ready.
    pub node: Option<String>,
    pub zone: Option<String>,
    pub node_ready: bool,
    /// The pod carries `valkey.rs/role=primary`.
    pub labelled_primary: bool,
    /// The pod's role label (`primary`, `replica`), as it is.
    pub role_label: Option<String>,
    /// What the server said; `None`: it did not answer (the reason beside).
    pub said: Option<Said>,
    pub unanswered: Option<String>,
    /// How long the member has not answered (from the operator's memory).
    pub unanswered_for: Duration,
    /// The pod runs an older template than its StatefulSet's (an image,
    /// config or resources change): it is to be restarted.
    pub stale: bool,
}

impl MemberFacts {
    /// Up: a pod that is not going, on a Ready node, whose server answers.
    fn up(&self) -> bool {
        self.pod.is_some() && !self.deleting && self.node_ready && self.said.is_some()
    }
}

/// What decide needs besides the members.
#[derive(Debug, Clone, Default)]
pub struct SetFacts {
    /// Members of the spec: `0..=replicas`.
    pub replicas: u32,
    /// Every member whose pod or StatefulSet exists (the spec's and those
    /// on their way out after a scale-in), by index.
    pub members: Vec<MemberFacts>,
    /// The primary the last status named (its member index), for when no
    /// pod carries the label (the primary's pod was deleted).
    pub last_primary: Option<u32>,
    /// `spec.primaryZone`.
    pub primary_zone: Option<String>,
    /// A switchover asked for by annotation: the pod to move the primary to.
    pub switchover_to: Option<String>,
}

impl SetFacts {
    /// The pod IP of member `member` ("" when it has none): what a replica
    /// of it names as `master_host`.
    fn ip_of(&self, member: u32) -> String {
        self.members
            .iter()
            .find(|m| m.member == member)
            .and_then(|m| m.ip.clone())
            .unwrap_or_default()
    }
}

/// What one reconcile does, in this order: [`Plan::unlabel`], then
/// [`Plan::promote`] or [`Plan::switchover`], then [`Plan::point`], then
/// [`Plan::labels`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The member that is the primary once this plan is carried out.
    pub primary: Option<u32>,
    /// Pods whose primary label comes off first (a primary that lost its
    /// place): nothing routes to them before anything is promoted.
    pub unlabel: Vec<String>,
    /// `REPLICAOF NO ONE` on this member (a failover or the bootstrap).
    pub promote: Option<u32>,
    /// A planned switchover: `FAILOVER TO` the second member, sent to the
    /// first (the primary); no acknowledged write is lost.
    pub switchover: Option<(u32, u32)>,
    /// `REPLICAOF <primary>` on these members.
    pub point: Vec<u32>,
    /// The role label each existing pod should carry (`None`: no role label),
    /// by pod name; applied after the commands.
    pub labels: BTreeMap<String, Option<&'static str>>,
    /// Members in sync with the primary (their pods Ready).
    pub ready_replicas: u32,
    /// Whether the set is Ready: a primary serving, every member of the
    /// spec in sync, nothing to do.
    pub ready: bool,
    /// Ready's reason and message.
    pub reason: &'static str,
    pub message: String,
    /// What this plan does, for the status and an event (`None`: nothing).
    pub action: Option<String>,
    /// Whether the primary changed (an event says so).
    pub primary_changed: bool,
    /// When to look again.
    pub requeue: Duration,
    /// Why a switchover asked for by annotation cannot be done (the
    /// annotation is removed and an event says why).
    pub switchover_refused: Option<String>,
    /// The switchover annotation is done with (carried out or refused).
    pub switchover_done: bool,
    /// A rolling restart's next step: this pod is deleted (its StatefulSet
    /// makes it again from the new template).
    pub restart: Option<String>,
    /// A rolling restart is under way (members on an older template).
    pub rolling: bool,
}

/// Ready's reasons.
pub mod reason {
    pub const READY: &str = "Ready";
    pub const NO_PRIMARY: &str = "NoPrimary";
    pub const FAILING_OVER: &str = "FailingOver";
    pub const PRIMARY_UNANSWERED: &str = "PrimaryNotAnswering";
    pub const MEMBERS_MISSING: &str = "MembersMissing";
    pub const REPLICA_NOT_IN_SYNC: &str = "ReplicaNotInSync";
    pub const SWITCHING_OVER: &str = "SwitchingOver";
}

const PRIMARY: &str = api::constants::ROLE_PRIMARY;
const REPLICA: &str = api::constants::ROLE_REPLICA;

/// Decides one reconcile of a replication set.
pub fn plan(facts: &SetFacts) -> Plan {
    let by_index: BTreeMap<u32, &MemberFacts> =
        facts.members.iter().map(|m| (m.member, m)).collect();
    let mut plan = Plan {
        requeue: STEADY_REQUEUE,
        ..Plan::default()
    };
    // Whom the set takes for its primary now: the labelled pod (the lowest
    // index if, against every rule here, several are), else the last
    // status's.
    let labelled: Vec<&MemberFacts> = facts
        .members
        .iter()
        .filter(|m| m.labelled_primary)
        .collect();
    let current = labelled
        .iter()
        .find(|m| m.up() && m.said.as_ref().is_some_and(|s| s.primary))
        .or(labelled.first())
        .map(|m| m.member)
        .or(facts.last_primary);
    // Every other labelled pod loses the label.
    for m in &labelled {
        if Some(m.member) != current
            && let Some(pod) = &m.pod
        {
            plan.unlabel.push(pod.clone());
        }
    }
    let primary = match current.and_then(|p| by_index.get(&p).copied()) {
        Some(p) => match primary_state(p) {
            PrimaryState::Serving => Some(p.member),
            PrimaryState::Waiting(left) => {
                plan.reason = reason::PRIMARY_UNANSWERED;
                plan.message = format!(
                    "the primary (member {}) does not answer ({}): failover in {}s unless it does",
                    p.member,
                    p.unanswered.as_deref().unwrap_or("no reply"),
                    left.as_secs().max(1)
                );
                plan.requeue = FAST_REQUEUE.min(left);
                plan.primary = Some(p.member);
                labels(facts, &mut plan, p.member);
                return plan;
            }
            PrimaryState::Lost(why) => {
                if let Some(pod) = &p.pod
                    && p.labelled_primary
                    && !plan.unlabel.contains(pod)
                {
                    plan.unlabel.push(pod.clone());
                }
                return failover(facts, plan, Some((p.member, why)));
            }
        },
        // The last primary is gone with its StatefulSet (scaled in), or
        // there never was one: the bootstrap.
        None => return failover(facts, plan, None),
    };
    let Some(primary) = primary else {
        return plan;
    };
    steady(facts, &by_index, plan, primary)
}

enum PrimaryState {
    Serving,
    /// Not answering; fail over after this much longer.
    Waiting(Duration),
    /// Lost, and why.
    Lost(String),
}

fn primary_state(p: &MemberFacts) -> PrimaryState {
    let Some(pod) = &p.pod else {
        return PrimaryState::Lost(format!("member {}'s pod is gone", p.member));
    };
    if p.deleting {
        return PrimaryState::Lost(format!("pod {pod} is being deleted"));
    }
    if !p.node_ready {
        return PrimaryState::Lost(format!(
            "node {} of pod {pod} is not Ready",
            p.node.as_deref().unwrap_or("?")
        ));
    }
    match &p.said {
        Some(s) if s.primary => PrimaryState::Serving,
        Some(_) => PrimaryState::Lost(format!(
            "pod {pod} restarted: its server is no primary any more"
        )),
        None if p.unanswered_for >= UNANSWERED_FAILOVER_AFTER => PrimaryState::Lost(format!(
            "pod {pod} has not answered for {}s ({})",
            p.unanswered_for.as_secs(),
            p.unanswered.as_deref().unwrap_or("no reply")
        )),
        None => PrimaryState::Waiting(UNANSWERED_FAILOVER_AFTER - p.unanswered_for),
    }
}

/// Promotes the most advanced member that answers (see the module docs).
fn failover(facts: &SetFacts, mut plan: Plan, lost: Option<(u32, String)>) -> Plan {
    let in_spec = |m: &MemberFacts| m.member <= facts.replicas;
    let candidates: Vec<&MemberFacts> = facts
        .members
        .iter()
        .filter(|m| m.up() && in_spec(m))
        .collect();
    // Without a primary yet (the bootstrap), wait for every member of the
    // spec whose pod exists to answer, so the choice sees every offset (a
    // set re-created over kept volumes), but never for a pod that cannot run.
    if lost.is_none() && facts.last_primary.is_none() {
        let waiting: Vec<u32> = facts
            .members
            .iter()
            .filter(|m| in_spec(m) && m.pod.is_some() && !m.up() && m.node_ready)
            .map(|m| m.member)
            .collect();
        if !waiting.is_empty() {
            plan.reason = reason::NO_PRIMARY;
            plan.message =
                format!("waiting for members {waiting:?} to answer before choosing the primary");
            plan.requeue = FAST_REQUEUE;
            return plan;
        }
    }
    let best = candidates.iter().max_by(|a, b| {
        let key = |m: &MemberFacts| {
            (
                m.said.as_ref().map_or(i64::MIN, |s| s.offset),
                // A member already serving as a primary (a failover that
                // went halfway) is as good as promoted.
                m.said.as_ref().is_some_and(|s| s.primary),
                facts.primary_zone.is_some() && m.zone == facts.primary_zone,
                std::cmp::Reverse(m.member),
            )
        };
        key(a).cmp(&key(b))
    });
    let Some(best) = best else {
        plan.reason = reason::NO_PRIMARY;
        plan.message = match &lost {
            Some((_, why)) => {
                format!("the primary is lost ({why}) and no member answers to replace it")
            }
            None => "no member answers yet".to_string(),
        };
        plan.requeue = FAST_REQUEUE;
        return plan;
    };
    plan.primary = Some(best.member);
    if !best.said.as_ref().is_some_and(|s| s.primary) {
        plan.promote = Some(best.member);
    }
    plan.primary_changed = lost.is_some();
    plan.action = Some(match &lost {
        Some((old, why)) => format!(
            "failover from member {old} to member {} ({why})",
            best.member
        ),
        None => format!("member {} is the primary", best.member),
    });
    plan.reason = reason::FAILING_OVER;
    plan.message = plan.action.clone().unwrap_or_default();
    plan.requeue = FAST_REQUEUE;
    // Every other member that answers follows the new primary at once.
    plan.point = facts
        .members
        .iter()
        .filter(|m| m.member != best.member && m.up())
        .map(|m| m.member)
        .collect();
    // Labels: the new primary's once promoted; replicas lose theirs until
    // they are seen in sync with it.
    for m in &facts.members {
        if let Some(pod) = &m.pod {
            let want = (m.member == best.member).then_some(PRIMARY);
            if m.role_label.as_deref() != want {
                plan.labels.insert(pod.clone(), want);
            }
        }
    }
    plan
}

/// The primary serves: point the strays, label who is in sync, say Ready.
fn steady(
    facts: &SetFacts,
    by_index: &BTreeMap<u32, &MemberFacts>,
    mut plan: Plan,
    primary: u32,
) -> Plan {
    plan.primary = Some(primary);
    let Some(p) = by_index.get(&primary) else {
        return plan;
    };
    let primary_ip = p.ip.clone().unwrap_or_default();
    for m in facts.members.iter().filter(|m| m.member != primary) {
        let Some(said) = &m.said else { continue };
        if m.pod.is_none() || m.deleting {
            continue;
        }
        let follows = said.following.as_ref().is_some_and(|(host, port)| {
            *host == primary_ip && *port == api::constants::VALKEY_PORT
        });
        if said.primary || !follows {
            plan.point.push(m.member);
        }
    }
    // A switchover: asked for by annotation, or the primary leaving with a
    // scale-in.
    let target = switchover_target(facts, &mut plan, primary);
    if let Some(to) = target {
        plan.switchover = Some((primary, to));
        plan.reason = reason::SWITCHING_OVER;
        plan.action = Some(format!("switchover from member {primary} to member {to}"));
        plan.message = plan.action.clone().unwrap_or_default();
        plan.requeue = FAST_REQUEUE;
    }
    labels(facts, &mut plan, primary);
    if target.is_some() {
        return plan;
    }
    let in_spec: Vec<&MemberFacts> = facts
        .members
        .iter()
        .filter(|m| m.member <= facts.replicas)
        .collect();
    let missing: Vec<u32> = (0..=facts.replicas)
        .filter(|i| !in_spec.iter().any(|m| m.member == *i && m.pod.is_some()))
        .collect();
    let behind: Vec<u32> = in_spec
        .iter()
        .filter(|m| m.member != primary && !in_sync(m, &primary_ip))
        .map(|m| m.member)
        .collect();
    let primary_pod_ready = p.pod_ready;
    if !missing.is_empty() {
        plan.reason = reason::MEMBERS_MISSING;
        plan.message = format!("members {missing:?} have no pod yet");
        plan.requeue = FAST_REQUEUE;
    } else if !behind.is_empty() || !plan.point.is_empty() || !primary_pod_ready {
        plan.reason = reason::REPLICA_NOT_IN_SYNC;
        plan.message = if primary_pod_ready {
            format!("members {behind:?} are not in sync with the primary yet")
        } else {
            format!("the primary (member {primary}) is not Ready yet")
        };
        plan.requeue = FAST_REQUEUE;
    } else {
        plan.ready = true;
        plan.reason = reason::READY;
        plan.message = format!(
            "member {primary} is the primary, {} replicas in sync",
            plan.ready_replicas
        );
        roll(facts, &mut plan, primary, &primary_ip);
    }
    plan
}

/// A rolling restart, one member at a time and only while every member is
/// in sync: replicas first, then the primary, after a switchover to the
/// most advanced replica (so no acknowledged write is lost and the primary
/// is never restarted while it serves).
fn roll(facts: &SetFacts, plan: &mut Plan, primary: u32, primary_ip: &str) {
    let stale: Vec<&MemberFacts> = facts
        .members
        .iter()
        .filter(|m| m.member <= facts.replicas && m.stale && m.pod.is_some())
        .collect();
    if stale.is_empty() {
        return;
    }
    plan.rolling = true;
    plan.requeue = FAST_REQUEUE;
    if let Some(replica) = stale.iter().find(|m| m.member != primary) {
        plan.restart.clone_from(&replica.pod);
        plan.action = Some(format!(
            "rolling restart of member {} (a replica)",
            replica.member
        ));
        return;
    }
    let to = facts
        .members
        .iter()
        .filter(|m| m.member <= facts.replicas && m.member != primary && in_sync(m, primary_ip))
        .max_by_key(|m| {
            (
                m.said.as_ref().map_or(i64::MIN, |s| s.offset),
                facts.primary_zone.is_some() && m.zone == facts.primary_zone,
                std::cmp::Reverse(m.member),
            )
        });
    match to {
        Some(to) => {
            plan.switchover = Some((primary, to.member));
            plan.action = Some(format!(
                "rolling restart: switchover from member {primary} to member {} before the primary restarts",
                to.member
            ));
        }
        // No replica to hand over to (replicas: 0): the primary restarts
        // where it is; its data comes back only with persistence.
        None => {
            plan.restart = stale.first().and_then(|m| m.pod.clone());
            plan.action = Some(format!(
                "rolling restart of member {primary} (the primary, without a replica)"
            ));
        }
    }
}

/// Whether replica `m` follows the primary at `primary_ip` with its link up
/// and its pod Ready.
fn in_sync(m: &MemberFacts, primary_ip: &str) -> bool {
    m.pod.is_some()
        && !m.deleting
        && m.pod_ready
        && m.said.as_ref().is_some_and(|s| {
            !s.primary
                && s.link_up
                && s.following
                    .as_ref()
                    .is_some_and(|(h, p)| h == primary_ip && *p == api::constants::VALKEY_PORT)
        })
}

/// The labels once `primary` serves: it is the primary; a member in sync is
/// a replica; any other member carries no role label (no Service routes to it).
fn labels(facts: &SetFacts, plan: &mut Plan, primary: u32) {
    let primary_ip = facts.ip_of(primary);
    plan.ready_replicas = 0;
    for m in &facts.members {
        let Some(pod) = &m.pod else { continue };
        // A primary switching over keeps its label until the switch is done
        // (it pauses its clients' writes meanwhile).
        let want = if m.member == primary {
            Some(PRIMARY)
        } else if in_sync(m, &primary_ip) && !plan.point.contains(&m.member) {
            plan.ready_replicas += 1;
            Some(REPLICA)
        } else {
            None
        };
        if plan.unlabel.contains(pod) && want == Some(PRIMARY) {
            continue;
        }
        if m.role_label.as_deref() != want {
            plan.labels.insert(pod.clone(), want);
        }
    }
}

/// The member to switch over to, if a switchover is due: the one the
/// annotation names (refused unless it is a replica in sync), or, when the
/// primary is outside the spec (a scale-in), the most advanced replica in
/// sync within it.
fn switchover_target(facts: &SetFacts, plan: &mut Plan, primary: u32) -> Option<u32> {
    let primary_ip = facts.ip_of(primary);
    if let Some(pod) = &facts.switchover_to {
        plan.switchover_done = true;
        let target = facts
            .members
            .iter()
            .find(|m| m.pod.as_deref() == Some(pod.as_str()));
        return match target {
            Some(t) if t.member == primary => None,
            Some(t) if t.member > facts.replicas => {
                plan.switchover_refused = Some(format!(
                    "{pod} is leaving the set (spec.replicas is {})",
                    facts.replicas
                ));
                None
            }
            Some(t) if in_sync(t, &primary_ip) => Some(t.member),
            Some(_) => {
                plan.switchover_refused =
                    Some(format!("{pod} is not a replica in sync with the primary"));
                None
            }
            None => {
                plan.switchover_refused = Some(format!("{pod} is no member of this set"));
                None
            }
        };
    }
    if primary <= facts.replicas {
        return None;
    }
    facts
        .members
        .iter()
        .filter(|m| m.member <= facts.replicas && in_sync(m, &primary_ip))
        .max_by_key(|m| {
            (
                m.said.as_ref().map_or(i64::MIN, |s| s.offset),
                std::cmp::Reverse(m.member),
            )
        })
        .map(|m| m.member)
}

/// Members outside the spec (`member > replicas`) whose StatefulSet may go:
/// none while one of them is the primary (it switches over first).
pub fn leaving(facts: &SetFacts, plan: &Plan) -> Vec<u32> {
    if plan.primary.is_none_or(|p| p > facts.replicas) {
        return Vec::new();
    }
    facts
        .members
        .iter()
        .filter(|m| m.member > facts.replicas)
        .map(|m| m.member)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica_of(ip: &str, offset: i64) -> Said {
        Said {
            primary: false,
            following: Some((ip.to_string(), 6379)),
            link_up: true,
            offset,
        }
    }

    fn primary(offset: i64) -> Said {
        Said {
            primary: true,
            following: None,
            link_up: false,
            offset,
        }
    }

    /// A member as it starts: a replica of nobody, with no data.
    fn nobody() -> Said {
        Said {
            primary: false,
            following: Some(("127.0.0.1".into(), 1)),
            link_up: false,
            offset: 0,
        }
    }

    fn member(i: u32, said: Option<Said>, role: Option<&str>) -> MemberFacts {
        MemberFacts {
            member: i,
            pod: Some(format!("cache-{i}-0")),
            ip: Some(format!("10.0.0.{}", i + 1)),
            pod_ready: true,
            node: Some(format!("n{i}")),
            zone: Some(format!("z{i}")),
            node_ready: true,
            labelled_primary: role == Some("primary"),
            role_label: role.map(str::to_string),
            said,
            ..MemberFacts::default()
        }
    }

    fn steady_set() -> SetFacts {
        SetFacts {
            replicas: 2,
            members: vec![
                member(0, Some(primary(100)), Some("primary")),
                member(1, Some(replica_of("10.0.0.1", 100)), Some("replica")),
                member(2, Some(replica_of("10.0.0.1", 90)), Some("replica")),
            ],
            last_primary: Some(0),
            ..SetFacts::default()
        }
    }

    #[test]
    fn a_steady_set_is_ready_and_changes_nothing() {
        let p = plan(&steady_set());
        assert!(p.ready, "{p:?}");
        assert_eq!(p.primary, Some(0));
        assert!(p.promote.is_none() && p.point.is_empty() && p.labels.is_empty());
        assert_eq!(p.ready_replicas, 2);
    }

    #[test]
    fn the_bootstrap_promotes_member_zero_and_points_the_others() {
        let facts = SetFacts {
            replicas: 2,
            members: (0..3).map(|i| member(i, Some(nobody()), None)).collect(),
            ..SetFacts::default()
        };
        let p = plan(&facts);
        assert_eq!(p.promote, Some(0));
        assert_eq!(p.point, vec![1, 2]);
        assert_eq!(p.labels.get("cache-0-0"), Some(&Some("primary")));
        assert!(!p.primary_changed);
    }

    #[test]
    fn the_primary_zone_breaks_the_tie_at_the_bootstrap() {
        let facts = SetFacts {
            replicas: 2,
            members: (0..3).map(|i| member(i, Some(nobody()), None)).collect(),
            primary_zone: Some("z2".into()),
            ..SetFacts::default()
        };
        assert_eq!(plan(&facts).promote, Some(2));
    }

    #[test]
    fn a_deleted_primary_is_replaced_by_the_most_advanced_replica_after_its_label_comes_off() {
        let mut facts = steady_set();
        facts.members[0].deleting = true;
        facts.members[2].said = Some(replica_of("10.0.0.1", 120));
        let p = plan(&facts);
        assert_eq!(p.unlabel, vec!["cache-0-0".to_string()]);
        assert_eq!(p.promote, Some(2));
        assert_eq!(p.point, vec![1]);
        assert!(p.primary_changed);
        assert_eq!(p.labels.get("cache-2-0"), Some(&Some("primary")));
        assert_eq!(p.labels.get("cache-1-0"), Some(&None));
    }

    #[test]
    fn a_primary_that_restarted_as_a_replica_is_lost_at_once_and_never_chosen_when_behind() {
        let mut facts = steady_set();
        // Restarted empty: a replica of nobody with offset 0, still labelled.
        facts.members[0].said = Some(nobody());
        let p = plan(&facts);
        assert_eq!(p.promote, Some(1));
        assert_eq!(p.unlabel, vec!["cache-0-0".to_string()]);
        assert!(p.point.contains(&0) && p.point.contains(&2));
    }

    #[test]
    fn a_primary_that_does_not_answer_is_waited_for_then_replaced() {
        let mut facts = steady_set();
        facts.members[0].said = None;
        facts.members[0].unanswered = Some("timed out".into());
        facts.members[0].unanswered_for = Duration::from_secs(2);
        let p = plan(&facts);
        assert!(p.promote.is_none() && p.unlabel.is_empty());
        assert_eq!(p.reason, reason::PRIMARY_UNANSWERED);
        facts.members[0].unanswered_for = UNANSWERED_FAILOVER_AFTER;
        let p = plan(&facts);
        assert_eq!(p.promote, Some(1));
    }

    #[test]
    fn a_node_that_is_not_ready_loses_its_primary_at_once() {
        let mut facts = steady_set();
        facts.members[0].node_ready = false;
        facts.members[0].said = None;
        assert_eq!(plan(&facts).promote, Some(1));
    }

    #[test]
    fn a_second_primary_is_pointed_at_the_labelled_one() {
        let mut facts = steady_set();
        facts.members[2].said = Some(primary(5));
        facts.members[2].role_label = None;
        let p = plan(&facts);
        assert_eq!(p.point, vec![2]);
        assert!(p.promote.is_none());
        assert!(!p.ready);
    }

    #[test]
    fn a_replica_out_of_sync_loses_its_label_and_the_set_is_not_ready() {
        let mut facts = steady_set();
        facts.members[1].said.as_mut().unwrap().link_up = false;
        let p = plan(&facts);
        assert_eq!(p.labels.get("cache-1-0"), Some(&None));
        assert!(!p.ready);
        assert_eq!(p.reason, reason::REPLICA_NOT_IN_SYNC);
    }

    #[test]
    fn only_one_pod_keeps_the_primary_label() {
        let mut facts = steady_set();
        facts.members[1].labelled_primary = true;
        facts.members[1].role_label = Some("primary".into());
        let p = plan(&facts);
        assert_eq!(p.unlabel, vec!["cache-1-0".to_string()]);
        assert_eq!(p.primary, Some(0));
    }

    #[test]
    fn a_scale_in_switches_the_primary_over_before_its_member_goes() {
        let mut facts = steady_set();
        facts.replicas = 1;
        facts.members.swap(0, 2);
        // Member 2 is the primary; members 0 and 1 follow it.
        facts.members = vec![
            member(0, Some(replica_of("10.0.0.3", 100)), Some("replica")),
            member(1, Some(replica_of("10.0.0.3", 100)), Some("replica")),
            member(2, Some(primary(100)), Some("primary")),
        ];
        facts.last_primary = Some(2);
        let p = plan(&facts);
        assert_eq!(p.switchover, Some((2, 0)));
        assert!(leaving(&facts, &p).is_empty());
        let p = plan(&steady_set_with_replicas(1));
        assert_eq!(leaving(&steady_set_with_replicas(1), &p), vec![2]);
    }

    fn steady_set_with_replicas(n: u32) -> SetFacts {
        let mut f = steady_set();
        f.replicas = n;
        f
    }

    #[test]
    fn a_switchover_by_annotation_needs_a_replica_in_sync() {
        let mut facts = steady_set();
        facts.switchover_to = Some("cache-2-0".into());
        let p = plan(&facts);
        assert_eq!(p.switchover, Some((0, 2)));
        facts.members[2].said.as_mut().unwrap().link_up = false;
        let p = plan(&facts);
        assert!(p.switchover.is_none());
        assert!(p.switchover_refused.is_some() && p.switchover_done);
    }

    #[test]
    fn a_roll_restarts_replicas_first_then_switches_the_primary_over() {
        let mut facts = steady_set();
        for m in &mut facts.members {
            m.stale = true;
        }
        let p = plan(&facts);
        assert_eq!(p.restart.as_deref(), Some("cache-1-0"));
        assert!(p.rolling && p.ready);
        facts.members[1].stale = false;
        facts.members[2].stale = false;
        let p = plan(&facts);
        assert_eq!(p.switchover, Some((0, 1)));
        assert!(p.restart.is_none());
        // A replica out of sync: nothing restarts.
        facts.members[2].said.as_mut().unwrap().link_up = false;
        let p = plan(&facts);
        assert!(p.switchover.is_none() && p.restart.is_none());
    }

    #[test]
    fn with_no_member_answering_nothing_is_promoted() {
        let mut facts = steady_set();
        for m in &mut facts.members {
            m.said = None;
            m.node_ready = false;
        }
        let p = plan(&facts);
        assert!(p.promote.is_none());
        assert_eq!(p.reason, reason::NO_PRIMARY);
    }
}
