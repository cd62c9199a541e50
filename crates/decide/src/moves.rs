//! The moves in flight, read again every reconcile from the facts (pure):
//! which member StatefulSets run a second pod, each move's next step
//! ([`super::surge::next`]), and how they show in the status.

use super::placement::Placement;
use super::safety;
use super::surge::{self, Surge, SurgePod, SurgeStep};
use crate::facts::{Facts, desired_members, node_of, serves_slots};
use crate::placement::SpreadState;
use crate::pods::PodFacts;
use crate::view::KubeView;
use api::constants::member_name;
use kube_core::ResourceExt;
use resources::statefulset::Ordinals;
use std::collections::BTreeSet;
use valkey::model::MemberIndex;

/// Every move in flight (a member's StatefulSet runs a second pod), with its
/// next step.
pub fn in_flight(f: &Facts<'_>, placement: &Placement) -> Vec<(Surge, SurgeStep)> {
    let mut out = Vec::new();
    for (s, m) in desired_members(f.cluster) {
        let Some(sts) = f.kube.statefulsets.get(&member_name(&f.cluster.name, s, m)) else {
            continue;
        };
        let ordinals = Ordinals::of(sts);
        if ordinals.surge().is_none() {
            continue;
        }
        let copy = MemberIndex::NewCopyOf(m);
        let pod = f.kube.surges.get(&(s, m)).map(|p| {
            let facts = PodFacts::of(p);
            SurgePod {
                scheduled: !facts.unscheduled(),
                terminating: facts.terminating,
                node_lost: f.on_lost_node(&facts),
                in_sync: f.in_sync_at(s, copy),
                primary: f.report_at(s, copy).is_some_and(serves_slots),
            }
        });
        let surge = Surge {
            shard: s,
            member: m,
            ordinals,
            pod,
            old_is_primary: f.primaries.get(&s) == Some(&m),
            served_elsewhere: f.served_elsewhere(s, copy),
            still_wanted: placement.moved(s, m),
        };
        let step = surge::next(&surge);
        out.push((surge, step));
    }
    out
}

/// Why no other move or restart may start now, if one is under way.
pub fn move_in_flight(surges: &[(Surge, SurgeStep)], view: &KubeView) -> Option<String> {
    if let Some((s, step)) = surges.first() {
        let detail = match step {
            SurgeStep::Wait(w) | SurgeStep::Abort(w) => w.clone(),
            SurgeStep::Promote => "handing the primary over to its new copy".to_string(),
            SurgeStep::Complete => "its new copy is in sync, the old one goes".to_string(),
        };
        return Some(format!("a member is moving ({}: {detail})", s.what()));
    }
    view.condemned.first().map(|((s, m), pod)| {
        format!(
            "a member is moving (shard {s} member {m}: its old copy, pod {}, is going)",
            pod.name_any()
        )
    })
}

/// One line per member the plan moves or that is moving, for the status.
pub fn move_lines(
    f: &Facts<'_>,
    placement: &Placement,
    surges: &[(Surge, SurgeStep)],
) -> Vec<String> {
    let view = f.kube;
    let mut lines = Vec::new();
    let mut busy: BTreeSet<(u32, u32)> = BTreeSet::new();
    for (surge, step) in surges {
        let key = (surge.shard, surge.member);
        busy.insert(key);
        let state = match step {
            SurgeStep::Wait(w) => w.clone(),
            SurgeStep::Promote => "handing the primary over to its new copy".to_string(),
            SurgeStep::Complete => "its new copy is in sync".to_string(),
            SurgeStep::Abort(_) => "giving the move up".to_string(),
        };
        lines.push(format!(
            "shard {} member {}: moving from node {} to {} ({state})",
            surge.shard,
            surge.member,
            node_of(view.members.get(&key)),
            match view.surges.get(&key).and_then(|p| PodFacts::of(p).node) {
                Some(n) => format!("node {n}"),
                None => "where the plan puts it".to_string(),
            }
        ));
    }
    for ((s, m), pod) in &view.condemned {
        if busy.insert((*s, *m)) {
            lines.push(format!(
                "shard {s} member {m}: its old copy (pod {} on node {}) is going",
                pod.name_any(),
                node_of(Some(pod))
            ));
        }
    }
    for (s, m) in desired_members(f.cluster) {
        let running = view
            .members
            .get(&(s, m))
            .is_some_and(|p| !PodFacts::of(p).unscheduled());
        if running && placement.moved(s, m) && !busy.contains(&(s, m)) {
            lines.push(format!(
                "shard {s} member {m}: on node {}, the plan puts it on node {}",
                node_of(view.members.get(&(s, m))),
                placement.node_of(s, m)
            ));
        }
    }
    lines
}

/// The TopologySpread state: the plan's, but not "met" while members still
/// have to get there.
pub fn spread_now(placement: &Placement, moves: &[String]) -> SpreadState {
    match placement.spread_state() {
        SpreadState::Met if !moves.is_empty() => SpreadState::Moving(moves.to_vec()),
        other => other,
    }
}

/// Why giving up move `surge` must wait, if it must: the new copy's volume
/// goes with the move, by the one volume rule ([`safety::give_up_volume`]).
pub fn keeps_new_copy_volume(f: &Facts<'_>, surge: &Surge) -> Option<String> {
    let pod = f.kube.surges.get(&(surge.shard, surge.member))?;
    let p = f.cluster.persistence.as_ref()?;
    let facts = PodFacts::of(pod);
    let copy = safety::CopyFacts {
        ever_joined: !facts.unscheduled(),
        node_lost_for: facts.node.as_deref().and_then(|n| f.node_lost_for(n)),
        serves_slots: surge.pod.as_ref().is_some_and(|p| p.primary),
        shard_served_elsewhere: surge.served_elsewhere,
    };
    safety::give_up_volume(&copy, p.node_loss_grace).err()
}

/// How a move is given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    /// Giving up waits: the new copy's volume is kept, for this reason.
    pub waits: Option<String>,
    /// The new copy is on a lost node: nobody there can finish its
    /// deletion, so it is force-deleted.
    pub force_delete_new: bool,
}

/// How each move of `surges` that is given up goes, by member.
pub fn giving_up(
    f: &Facts<'_>,
    surges: &[(Surge, SurgeStep)],
) -> std::collections::BTreeMap<(u32, u32), GiveUp> {
    surges
        .iter()
        .filter(|(_, step)| matches!(step, SurgeStep::Abort(_)))
        .map(|(surge, _)| {
            let new = f.kube.surges.get(&(surge.shard, surge.member));
            let give_up = GiveUp {
                waits: keeps_new_copy_volume(f, surge),
                force_delete_new: new.is_some_and(|p| f.on_lost_node(&PodFacts::of(p))),
            };
            ((surge.shard, surge.member), give_up)
        })
        .collect()
}
