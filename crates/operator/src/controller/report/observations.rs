//! The parts of the status besides the conditions (pure): members, shards,
//! topology and its one-line summary, and what the conditions are computed
//! from (where the Valkey side stands, whether the cluster is bootstrapping).

use super::status::{ClusterState, Observations, SpreadState};
use api::constants::{ROLE_PRIMARY, ROLE_REPLICA, member_name};
use api::v1alpha1::{
    CONDITION_READY, MemberStatus, ShardStatus, ShardTopology, TopologyMember, ValkeyClusterStatus,
};
use decide::facts::{Facts, desired_members};
use decide::pods::PodFacts;
use kube::ResourceExt;
use resources::statefulset::Ordinals;
use std::collections::{BTreeMap, BTreeSet};
use valkey::model::{MemberRef, ObservedCluster, ObservedMember};
use valkey::parse::Role;
use valkey::planner::{self, Health};

/// Whether the cluster has never been Ready and its members are being
/// brought together (no slot assigned yet, or no status yet).
pub fn is_bootstrapping(obs: &ObservedCluster, old: Option<&ValkeyClusterStatus>) -> bool {
    let ever_ready = ever_ready(old);
    let any_slots = obs
        .members
        .iter()
        .filter_map(ObservedMember::report)
        .any(|r| !r.nodes.myself().slots.is_empty());
    !ever_ready && (!any_slots || old.is_none())
}

/// Whether the last status says the cluster was ever Ready (a shard ready,
/// or the Ready condition True).
pub fn ever_ready(old: Option<&ValkeyClusterStatus>) -> bool {
    old.is_some_and(|s| {
        s.ready_shards > 0
            || s.condition(CONDITION_READY)
                .is_some_and(|c| c.status == "True")
    })
}

/// Where the Valkey side stands, from the members' health.
pub fn cluster_state(h: &Health, all_pods_ready: bool, blocked: Vec<String>) -> ClusterState {
    let ready = h.is_ready() && all_pods_ready;
    let reason = if h.is_ready() && !all_pods_ready {
        Some("PodsNotReady".to_string())
    } else {
        h.first_reason().map(str::to_string)
    };
    let message = if ready {
        format!(
            "{} shard(s) serve all 16384 slots with every replica in sync",
            h.ready_shards
        )
    } else {
        let mut issues: Vec<String> = h.issues.iter().take(3).map(ToString::to_string).collect();
        if h.issues.len() > 3 {
            issues.push(format!("and {} more", h.issues.len() - 3));
        }
        if issues.is_empty() {
            "member pods are not all Ready".into()
        } else {
            issues.join("; ")
        }
    };
    ClusterState {
        ready,
        degraded: h.is_degraded(),
        reason,
        message,
        blocked,
    }
}

/// Members, shards and topology as observed now.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn observations(
    f: &Facts<'_>,
    h: &Health,
    spread: &SpreadState,
    last_action: Option<String>,
) -> Observations {
    let (cluster, view, obs) = (f.cluster, f.kube, f.valkey);
    let primaries = &f.primaries;
    let mut refs: BTreeSet<(u32, u32)> = desired_members(cluster).collect();
    refs.extend(view.members.keys().copied());
    let not_ready: BTreeSet<MemberRef> = h
        .issues
        .iter()
        .filter_map(|i| match i {
            planner::HealthIssue::MemberUnreachable { member }
            | planner::HealthIssue::ReplicaMissing { member }
            | planner::HealthIssue::ReplicaNotInSync { member, .. }
            | planner::HealthIssue::MemberNotJoined { member } => Some(*member),
            _ => None,
        })
        .collect();
    let external = decide::external::addresses(cluster, view);
    let mut members = Vec::new();
    let mut topology: BTreeMap<u32, Vec<TopologyMember>> = BTreeMap::new();
    for (s, m) in refs {
        let pod = view.members.get(&(s, m));
        let facts = pod.map(PodFacts::of);
        let node = facts.as_ref().and_then(|f| f.node.clone());
        let labels = node.as_deref().and_then(|n| view.node_labels(n));
        let zone = labels.and_then(|l| l.get(placement::ZONE_KEY)).cloned();
        let region = labels.and_then(|l| l.get(placement::REGION_KEY)).cloned();
        let report = f.report(s, m);
        let role = report.map(|r| match r.role() {
            Role::Primary => ROLE_PRIMARY.to_string(),
            Role::Replica => ROLE_REPLICA.to_string(),
        });
        let node_id = report.map(|r| r.node_id().to_string()).or_else(|| {
            obs.members
                .iter()
                .find(|x| x.member == MemberRef::new(s, m))
                .and_then(|x| x.known_node_id.as_ref())
                .map(ToString::to_string)
        });
        let former_node_ids = former_node_ids(obs, MemberRef::new(s, m));
        let ready = facts.as_ref().is_some_and(|f| f.ready)
            && report.is_some()
            && !not_ready.contains(&MemberRef::new(s, m));
        // The live pod's name: a member that moved runs under a later ordinal.
        let pod_name = pod.map(ResourceExt::name_any).unwrap_or_else(|| {
            let sts = member_name(&cluster.name, s, m);
            let start = view
                .statefulsets
                .get(&sts)
                .map(Ordinals::of)
                .unwrap_or(Ordinals::INITIAL)
                .start;
            format!("{sts}-{start}")
        });
        members.push(MemberStatus {
            shard: s as i32,
            member: m as i32,
            pod: pod_name,
            node: node.clone(),
            zone: zone.clone(),
            region: region.clone(),
            role: role.clone(),
            node_id,
            former_node_ids,
            ready,
            ip: facts.as_ref().and_then(|f| f.ip).map(|ip| ip.to_string()),
            version: report.and_then(|r| r.version.clone()),
            modules: report.map(|r| r.modules.clone()).unwrap_or_default(),
            module_error: module_error(cluster, report, pod),
            external_address: external
                .get(&(s, m))
                .map(ToString::to_string)
                .unwrap_or_default(),
        });
        if s < cluster.shards && m <= cluster.replicas {
            topology.entry(s).or_default().push(TopologyMember {
                member: m as i32,
                node,
                zone,
                region,
                role,
            });
        }
    }
    let shards = (0..cluster.shards)
        .map(|s| {
            let primary = primaries.get(&s).copied();
            let slots = primary
                .and_then(|p| f.report(s, p))
                .map(|r| r.nodes.myself().slots.to_string());
            ShardStatus {
                index: s as i32,
                slots,
                primary: primary.map(|p| p as i32),
            }
        })
        .collect();
    let zones: BTreeSet<&String> = members.iter().filter_map(|m| m.zone.as_ref()).collect();
    let spread = match spread {
        SpreadState::Met => "spread ok".to_string(),
        SpreadState::Unplaceable(r) => format!("{} member(s) unplaceable", r.len()),
        SpreadState::Exceeded(v) => format!("{} preferred violation(s)", v.len()),
        SpreadState::Moving(v) => format!("{} member(s) moving", v.len()),
        SpreadState::Unknown(_) => "placement unknown".to_string(),
    };
    let summary = format!(
        "{}/{} shards ready, {} zone(s), {spread}",
        h.ready_shards,
        cluster.shards,
        zones.len()
    );
    Observations {
        ready_shards: i32::try_from(h.ready_shards).unwrap_or(i32::MAX),
        shards,
        members,
        topology: topology
            .into_iter()
            .map(|(shard, members)| ShardTopology {
                shard: shard as i32,
                members,
            })
            .collect(),
        topology_summary: Some(summary),
        last_action,
        message: Some(if h.is_ready() {
            "ready".to_string()
        } else {
            h.first_reason().unwrap_or("converging").to_string()
        }),
    }
}

/// Why a module of `spec.modules` is not loaded on a member: the names
/// MODULE LIST lacks when it answers, else the server's last words when it
/// stopped over a module (valkey-server logs `Module <path> failed to load`
/// and exits; the kubelet keeps that log tail as the container's
/// termination message, see the StatefulSet builder).
fn module_error(
    cluster: &api::ValidatedCluster,
    report: Option<&valkey::NodeReport>,
    pod: Option<&k8s_openapi::api::core::v1::Pod>,
) -> Option<String> {
    if cluster.modules.is_empty() {
        return None;
    }
    if let Some(r) = report {
        let missing: Vec<&str> = cluster
            .modules
            .iter()
            .filter(|m| !r.modules.contains(&m.name))
            .map(|m| m.name.as_str())
            .collect();
        // An empty list is a member that could not say (see observe_node).
        return (!missing.is_empty() && !r.modules.is_empty())
            .then(|| format!("not loaded: {}", missing.join(", ")));
    }
    let statuses = pod?.status.as_ref()?.container_statuses.as_ref()?;
    let valkey = statuses
        .iter()
        .find(|c| c.name == api::constants::VALKEY_CONTAINER)?;
    let terminated = valkey
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| valkey.last_state.as_ref()?.terminated.as_ref())?;
    let message = terminated.message.as_deref()?;
    message
        .lines()
        .rev()
        .find(|l| l.contains("Module ") || l.contains("module"))
        .map(|l| l.trim().to_string())
}

/// At most this many former ids per member are kept.
const FORMER_IDS_KEPT: usize = 8;

/// The ids member `r` had before its current one: those recorded already and
/// the recorded id when it now answers under another, kept while a member
/// that answers still lists them (or none answers), newest last.
fn former_node_ids(obs: &ObservedCluster, r: MemberRef) -> Vec<String> {
    let Some(me) = obs.members.iter().find(|x| x.member == r) else {
        return Vec::new();
    };
    let mut ids = me.former_node_ids.clone();
    if let (Some(report), Some(known)) = (me.report(), &me.known_node_id)
        && report.node_id() != known
        && !ids.contains(known)
    {
        ids.push(known.clone());
    }
    let views: Vec<_> = obs.members.iter().filter_map(|x| x.report()).collect();
    ids.retain(|id| views.is_empty() || views.iter().any(|v| v.nodes.get(id).is_some()));
    let skip = ids.len().saturating_sub(FORMER_IDS_KEPT);
    ids.into_iter()
        .skip(skip)
        .map(|id| id.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use valkey::model::{MemberState, NodeReport};
    use valkey::parse::{ClusterNodes, NodeId, ReplicationInfo};

    fn id(c: char) -> NodeId {
        c.to_string().repeat(40).parse().unwrap()
    }

    fn member(m: u32, known: Option<char>, former: &[char], view: Option<&str>) -> ObservedMember {
        ObservedMember {
            member: MemberRef::new(0, m),
            addr: None,
            known_node_id: known.map(id),
            former_node_ids: former.iter().copied().map(id).collect(),
            state: match view {
                Some(nodes) => MemberState::Reachable(Box::new(NodeReport {
                    nodes: ClusterNodes::parse(nodes).unwrap(),
                    replication: ReplicationInfo::parse(
                        "role:master\nmaster_repl_offset:0\nconnected_slaves:0\n",
                    )
                    .unwrap(),
                    slot_migrations: Vec::new(),
                    keys: 0,
                    config: BTreeMap::new(),
                    cluster_state_ok: true,
                    version: None,
                    modules: Vec::new(),
                })),
                None => MemberState::Unreachable {
                    reason: "refused".into(),
                },
            },
        }
    }

    #[test]
    fn a_replaced_id_is_kept_while_a_view_lists_it_and_dropped_after() {
        let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
        // 0/0 answers as c, recorded as a before: a joins the former ids
        // while 0/1's view still lists it.
        let view0 = format!("{c} 10.0.0.1:6379@16379 myself,master - 0 0 1 connected");
        let view1 = format!(
            "{b} 10.0.0.2:6379@16379 myself,master - 0 0 2 connected 0-16383\n\
             {a} :0@0 master,fail,noaddr - 0 0 1 disconnected"
        );
        let obs = ObservedCluster {
            members: vec![
                member(0, Some('a'), &[], Some(&view0)),
                member(1, Some('b'), &[], Some(&view1)),
            ],
        };
        assert_eq!(former_node_ids(&obs, MemberRef::new(0, 0)), vec![a.clone()]);
        // Next time the status records c; a stays while listed.
        let obs = ObservedCluster {
            members: vec![
                member(0, Some('c'), &['a'], Some(&view0)),
                member(1, Some('b'), &[], Some(&view1)),
            ],
        };
        assert_eq!(former_node_ids(&obs, MemberRef::new(0, 0)), vec![a.clone()]);
        // Forgotten everywhere: dropped.
        let view1 = format!("{b} 10.0.0.2:6379@16379 myself,master - 0 0 2 connected 0-16383");
        let obs = ObservedCluster {
            members: vec![
                member(0, Some('c'), &['a'], Some(&view0)),
                member(1, Some('b'), &[], Some(&view1)),
            ],
        };
        assert!(former_node_ids(&obs, MemberRef::new(0, 0)).is_empty());
        // Nobody answers: nothing can be checked, everything is kept.
        let obs = ObservedCluster {
            members: vec![
                member(0, Some('c'), &['a'], None),
                member(1, Some('b'), &[], None),
            ],
        };
        assert_eq!(former_node_ids(&obs, MemberRef::new(0, 0)), vec![a]);
    }
}
