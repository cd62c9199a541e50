//! What goes, and what is patched in place (pure): budgets of shards that
//! are gone, leaving members that are safe to remove, Pending pods created
//! with outdated scheduling rules, volumes of copies a move removed, copies
//! stranded on lost nodes, volumes to grow, role labels that are wrong.
//!
//! Each function names the objects; [`crate::controller::act`] writes.

use super::safety;
use crate::facts::{Facts, claims_by_ordinal, desired_members, member_of};
use crate::pods::{PodFacts, placement_outdated, template_annotation};
use crate::view::KubeView;
use api::ValidatedCluster;
use api::constants::{ROLE_PRIMARY, ROLE_REPLICA, member_name};
use k8s_openapi::api::core::v1::Pod;
use kube_core::ResourceExt;
use resources::statefulset::{ANNOTATION_PLACEMENT_HASH, Ordinals};
use resources::{Desired, pdb_name};
use std::collections::BTreeSet;
use valkey::model::{MemberIndex, MemberRef, NodeReport};
use valkey::parse::Role;

/// An object to delete: its name and, when known, its uid (so a newer
/// object of the same name is never deleted by mistake).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doomed {
    pub name: String,
    pub uid: Option<String>,
}

/// Budgets of shards that are gone (no member pod left), or all of them when
/// budgets are turned off.
pub fn orphaned_pdbs(
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
) -> Vec<String> {
    let wanted: BTreeSet<String> = desired.pdbs.iter().map(ResourceExt::name_any).collect();
    view.pdbs
        .keys()
        .filter(|n| !wanted.contains(*n))
        .filter(|name| {
            let shard_has_pods = view
                .members
                .keys()
                .any(|(s, _)| pdb_name(&cluster.name, *s) == **name);
            !shard_has_pods || !cluster.pod_disruption_budget
        })
        .cloned()
        .collect()
}

/// The cluster's NetworkPolicies it no longer wants (all of them when it
/// keeps none; any other name than the wanted one otherwise).
pub fn orphaned_network_policy(desired: &Desired, view: &KubeView) -> Vec<String> {
    let wanted = desired.network_policy.as_ref().map(ResourceExt::name_any);
    view.network_policies
        .keys()
        .filter(|n| Some(*n) != wanted.as_ref())
        .cloned()
        .collect()
}

/// The members' external Services the cluster no longer wants (all of them
/// when external access is off; those of members that are gone). Only
/// `-external` Services: the headless and client Services always stay.
pub fn orphaned_external_services(desired: &Desired, view: &KubeView) -> Vec<Doomed> {
    let wanted: BTreeSet<String> = desired.external.iter().map(ResourceExt::name_any).collect();
    view.services
        .iter()
        .filter(|(name, _)| name.ends_with("-external") && !wanted.contains(*name))
        .map(|(name, s)| Doomed {
            name: name.clone(),
            uid: s.metadata.uid.clone(),
        })
        .collect()
}

/// Owned objects to delete before anything else is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Orphans {
    /// The members' external Services.
    pub services: Vec<Doomed>,
    /// PodDisruptionBudgets by name.
    pub pdbs: Vec<String>,
    /// NetworkPolicies by name.
    pub network_policy: Vec<String>,
}

/// A leaving member to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaving {
    pub shard: u32,
    pub member: u32,
    pub statefulset: Doomed,
}

/// The StatefulSets of leaving members that may go: the planner says they
/// are safe to remove (their slots moved, no replica follows them), or they
/// never joined and never ran ([`safety::may_remove_leaving`]).
pub fn leaving_members(
    cluster: &ValidatedCluster,
    view: &KubeView,
    removable: &[MemberRef],
    joined: &BTreeSet<(u32, u32)>,
) -> Vec<Leaving> {
    let desired: BTreeSet<String> = desired_members(cluster)
        .map(|(s, m)| member_name(&cluster.name, s, m))
        .collect();
    let mut out = Vec::new();
    for (name, sts) in &view.statefulsets {
        if desired.contains(name) {
            continue;
        }
        let Some((s, m)) = member_of(sts) else {
            continue;
        };
        let ran = view
            .members
            .get(&(s, m))
            .is_some_and(|p| !PodFacts::of(p).unscheduled());
        if safety::may_remove_leaving(
            removable.contains(&MemberRef::new(s, m)),
            joined.contains(&(s, m)),
            ran,
        ) {
            out.push(Leaving {
                shard: s,
                member: m,
                statefulset: Doomed {
                    name: name.clone(),
                    uid: sts.metadata.uid.clone(),
                },
            });
        }
    }
    out
}

/// Pod scheduling rules are immutable: a Pending pod created with rules the
/// plan no longer wants is deleted (it never ran, nothing is lost) and its
/// StatefulSet re-creates it with the new ones, once the live StatefulSet
/// carries the new template. A move's new copy counts as its member.
pub fn pending_pods_to_replace<'v>(
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &'v KubeView,
) -> Vec<&'v Pod> {
    let mut out = Vec::new();
    for k in desired_members(cluster) {
        let name = member_name(&cluster.name, k.0, k.1);
        let Some(sts) = desired.statefulsets.iter().find(|x| x.name_any() == name) else {
            continue;
        };
        // Else the re-created pod would get the old rules again.
        let live_current = view.statefulsets.get(&name).is_some_and(|live| {
            template_annotation(live, ANNOTATION_PLACEMENT_HASH)
                == template_annotation(sts, ANNOTATION_PLACEMENT_HASH)
        });
        for pod in view
            .members
            .get(&k)
            .into_iter()
            .chain(view.new_copies.get(&k))
        {
            let facts = PodFacts::of(pod);
            if facts.unscheduled()
                && !facts.terminating
                && placement_outdated(&facts, sts)
                && live_current
            {
                out.push(pod);
            }
        }
    }
    out
}

/// The claims of copies a finished move removed: ordinals below the
/// StatefulSet's start are never used again (ordinals only grow). Only once
/// the member's current copy holds the shard's data (`holds(s, m)`: it is
/// the shard's live primary, or a replica in sync with it): until then an
/// old copy's volume may be the shard's last copy of data (a start moved
/// by hand, a new copy that lost its volume), the same evidence the other
/// paths that end a copy ask for (`safety`).
pub fn moved_volumes(
    cluster: &ValidatedCluster,
    view: &KubeView,
    holds: impl Fn(u32, u32) -> bool,
) -> Vec<Doomed> {
    if cluster.persistence.is_none() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (s, m) in desired_members(cluster).filter(|&(s, m)| holds(s, m)) {
        let name = member_name(&cluster.name, s, m);
        let Some(live) = view.statefulsets.get(&name) else {
            continue;
        };
        let start = Ordinals::of(live).start;
        for (index, pvc) in claims_by_ordinal(view, &name) {
            if index < start && pvc.metadata.deletion_timestamp.is_none() {
                out.push(Doomed {
                    name: pvc.name_any(),
                    uid: pvc.metadata.uid.clone(),
                });
            }
        }
    }
    out
}

/// Copies a move removed whose node is lost: the kubelet that would finish
/// their deletion is gone (the member lives on in its other copy), so they
/// are force-deleted.
pub fn stranded_copies<'v>(f: &Facts<'v>) -> Vec<&'v Pod> {
    f.kube
        .condemned
        .iter()
        .map(|(_, pod)| pod)
        .filter(|pod| f.on_lost_node(&PodFacts::of(pod)))
        .collect()
}

/// The claims to grow to `persistence.size` (volumeClaimTemplates are
/// immutable, so the members' claims are patched directly), unless the API
/// server refused this size before (`refused`).
pub fn volumes_to_grow(
    cluster: &ValidatedCluster,
    view: &KubeView,
    refused: Option<&str>,
) -> Vec<String> {
    let Some(p) = &cluster.persistence else {
        return Vec::new();
    };
    if refused == Some(p.size.0.as_str()) {
        return Vec::new();
    }
    view.pvcs
        .iter()
        .filter(|(_, pvc)| {
            let current = pvc
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .and_then(|q| api::quantity::value(&q.0).ok());
            !(current.is_none_or(|c| c >= p.size_bytes)
                || pvc.metadata.deletion_timestamp.is_some())
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// The role label a member should carry: `primary` for a primary that
/// serves slots, `replica` for a replica. A fresh node (an empty primary not
/// yet attached to its shard) keeps the label it has, so selecting
/// `valkey.rs/role=primary` never finds a node that serves nothing.
pub fn role_label(report: &NodeReport) -> Option<&'static str> {
    match report.role() {
        Role::Primary if !report.nodes.myself().slots.is_empty() => Some(ROLE_PRIMARY),
        Role::Primary => None,
        Role::Replica => Some(ROLE_REPLICA),
    }
}

/// The member pods (new copies of moves included) whose `valkey.rs/role`
/// label differs from the live role, with the label they should carry.
pub fn role_labels<'v>(f: &Facts<'v>) -> Vec<(&'v Pod, &'static str)> {
    let mut pods: Vec<(u32, MemberIndex, &Pod)> = f
        .kube
        .members
        .iter()
        .map(|(k, pod)| (k.0, MemberIndex::Member(k.1), pod))
        .collect();
    for (k, pod) in &f.kube.new_copies {
        pods.push((k.0, MemberIndex::NewCopyOf(k.1), pod));
    }
    pods.into_iter()
        .filter_map(|(s, index, pod)| {
            let want = role_label(f.report_at(s, index)?)?;
            (PodFacts::of(pod).role_label.as_deref() != Some(want)).then_some((pod, want))
        })
        .collect()
}
