//! A replication set's status (built pure, written only when it changed)
//! and its events.

use crate::error::Error;
use api::constants::{FIELD_MANAGER, GROUP, KIND_REPLICATION, VERSION};
use api::v1alpha1::status::{
    CONDITION_DEGRADED, CONDITION_PROGRESSING, CONDITION_READY, CONDITION_TOPOLOGY_SPREAD,
};
use api::v1alpha1::{ReplicationMemberStatus, ValkeyReplication, ValkeyReplicationStatus};
use decide::conditions::{Cond, merge_conditions};
use decide::placement::SpreadState;
use decide::replication::{MemberFacts, Plan, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};

/// What the status is built from.
pub struct Report<'a> {
    pub name: &'a str,
    pub generation: Option<i64>,
    pub old: Option<&'a ValkeyReplicationStatus>,
    pub now: Time,
}

/// The status of a set whose spec is invalid, or which cannot run (a
/// Secret it names is missing): the conditions say why.
pub fn stopped(r: &Report<'_>, reason: &str, message: &str) -> ValkeyReplicationStatus {
    let old = r.old.cloned().unwrap_or_default();
    let conds = [
        Cond::new(CONDITION_READY, false, reason, message),
        Cond::new(CONDITION_PROGRESSING, false, reason, message),
        Cond::new(CONDITION_DEGRADED, true, reason, message),
    ];
    ValkeyReplicationStatus {
        observed_generation: r.generation,
        conditions: merge_conditions(&old.conditions, &conds, r.generation, &r.now),
        message: Some(message.to_string()),
        selector: Some(api::constants::replication_member_selector(r.name)),
        ..old
    }
}

/// The status after a reconcile that decided `plan`.
pub fn build(
    r: &Report<'_>,
    plan: &Plan,
    members: &[MemberFacts],
    spread: &SpreadState,
    done: &[String],
) -> ValkeyReplicationStatus {
    let old = r.old.cloned().unwrap_or_default();
    let progressing = if plan.rolling {
        (true, "RollingUpdate")
    } else if !plan.ready {
        (true, plan.reason)
    } else {
        (false, "Stable")
    };
    let degraded = plan.reason == reason::NO_PRIMARY;
    let spread_cond = match spread {
        SpreadState::Met => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            true,
            "Met",
            "every replicaSpreadConstraint holds",
        ),
        SpreadState::Moving(lines) => {
            Cond::new(CONDITION_TOPOLOGY_SPREAD, false, "Moving", lines.join("; "))
        }
        SpreadState::Unplaceable(lines) => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            false,
            "Unplaceable",
            lines.join("; "),
        ),
        SpreadState::Exceeded(lines) => Cond::new(
            CONDITION_TOPOLOGY_SPREAD,
            false,
            "Exceeded",
            lines.join("; "),
        ),
        SpreadState::Unknown(m) => Cond::new(CONDITION_TOPOLOGY_SPREAD, false, "Unknown", m),
    };
    let conds = [
        Cond::new(CONDITION_READY, plan.ready, plan.reason, &plan.message),
        Cond::new(
            CONDITION_PROGRESSING,
            progressing.0,
            progressing.1,
            plan.action.clone().unwrap_or_else(|| plan.message.clone()),
        ),
        Cond::new(
            CONDITION_DEGRADED,
            degraded,
            if degraded { plan.reason } else { "AsExpected" },
            if degraded { plan.message.as_str() } else { "" },
        ),
        spread_cond,
    ];
    let primary_pod = plan
        .primary
        .and_then(|p| members.iter().find(|m| m.member == p))
        .and_then(|m| m.pod.clone());
    let primary_offset = plan
        .primary
        .and_then(|p| members.iter().find(|m| m.member == p))
        .and_then(|m| m.said.as_ref().map(|s| s.offset));
    ValkeyReplicationStatus {
        observed_generation: r.generation,
        conditions: merge_conditions(&old.conditions, &conds, r.generation, &r.now),
        primary: primary_pod,
        ready_replicas: i32::try_from(plan.ready_replicas).unwrap_or(i32::MAX),
        members: members
            .iter()
            .filter_map(|m| member_status(m, plan, primary_offset))
            .collect(),
        selector: Some(api::constants::replication_member_selector(r.name)),
        last_action: done
            .first()
            .map(|_| plan.action.clone().unwrap_or_else(|| done.join("; ")))
            .or(old.last_action),
        message: Some(plan.message.clone()),
    }
}

fn member_status(
    m: &MemberFacts,
    plan: &Plan,
    primary_offset: Option<i64>,
) -> Option<ReplicationMemberStatus> {
    let pod = m.pod.clone()?;
    let is_primary = plan.primary == Some(m.member);
    let role = if is_primary {
        Some(api::constants::ROLE_PRIMARY.to_string())
    } else if m.said.as_ref().is_some_and(|s| !s.primary && s.link_up) {
        Some(api::constants::ROLE_REPLICA.to_string())
    } else {
        None
    };
    let offset = m.said.as_ref().map(|s| s.offset);
    let ready = m.pod_ready
        && match (&role, &m.said) {
            (Some(_), Some(s)) => is_primary == s.primary,
            _ => false,
        };
    Some(ReplicationMemberStatus {
        name: pod,
        member: i32::try_from(m.member).unwrap_or(i32::MAX),
        role,
        node: m.node.clone(),
        zone: m.zone.clone(),
        ip: m.ip.clone(),
        ready,
        offset,
        lag: match (is_primary, offset, primary_offset) {
            (false, Some(o), Some(p)) => Some((p - o).max(0)),
            _ => None,
        },
        reason: if ready {
            None
        } else if m.deleting {
            Some("the pod is being deleted".into())
        } else if let Some(why) = &m.unanswered {
            Some(format!("does not answer: {why}"))
        } else if !m.pod_ready {
            Some("the pod is not Ready".into())
        } else {
            Some("not in sync with the primary".into())
        },
    })
}

/// Writes `new` unless it equals the status the set has.
pub async fn write(
    api: &Api<ValkeyReplication>,
    ctx: &crate::context::Context,
    r: &Report<'_>,
    new: &ValkeyReplicationStatus,
) -> Result<(), Error> {
    if r.old == Some(new) {
        return Ok(());
    }
    ctx.metrics.api_write(KIND_REPLICATION, "status");
    let patch = serde_json::json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND_REPLICATION,
        "status": new,
    });
    api.patch_status(
        r.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|source| Error::Status {
        name: r.name.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use decide::replication::Said;

    fn report() -> Report<'static> {
        Report {
            name: "cache",
            generation: Some(1),
            old: None,
            now: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn the_status_names_the_primary_pod_and_each_members_role() {
        let members = vec![
            MemberFacts {
                member: 0,
                pod: Some("cache-0-0".into()),
                pod_ready: true,
                said: Some(Said {
                    primary: true,
                    following: None,
                    link_up: false,
                    offset: 10,
                }),
                ..MemberFacts::default()
            },
            MemberFacts {
                member: 1,
                pod: Some("cache-1-0".into()),
                pod_ready: true,
                said: Some(Said {
                    primary: false,
                    following: Some(("10.0.0.1".into(), 6379)),
                    link_up: true,
                    offset: 7,
                }),
                ..MemberFacts::default()
            },
        ];
        let plan = Plan {
            primary: Some(0),
            ready: true,
            reason: reason::READY,
            ready_replicas: 1,
            ..Plan::default()
        };
        let s = build(&report(), &plan, &members, &SpreadState::Met, &[]);
        assert_eq!(s.primary.as_deref(), Some("cache-0-0"));
        assert_eq!(s.ready_replicas, 1);
        assert_eq!(s.members[0].role.as_deref(), Some("primary"));
        assert_eq!(s.members[1].role.as_deref(), Some("replica"));
        assert_eq!(s.members[1].lag, Some(3));
        assert!(s.members.iter().all(|m| m.ready));
        assert_eq!(
            s.selector.as_deref(),
            Some("valkey.rs/replication=cache,valkey.rs/member")
        );
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
    }
}
