//! The decisions that read the live cluster, from fixtures: a cluster spec, a
//! Kubernetes view built from YAML, and (where Valkey matters) no reports.

use super::cleanup;
use super::heal::{self, Heal};
use super::moves;
use super::moves::{Move, MoveStep};
use super::placement::Placement;
use super::rolling::{self, RollStep};
use crate::facts::{Facts, claim_of};
use crate::memory::{Announced, Memory};
use crate::view::KubeView;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetOrdinals, StatefulSetSpec};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use resources::adapt::fixtures::{cluster, pod, ready_node};
use resources::scheduling::MemberPlacement;
use resources::statefulset::Ordinals;
use resources::test_support::owner;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use valkey::model::{MemberRef, ObservedCluster};

/// Member pod `(s, m)` of cluster `cache` at ordinal `index`, on `node`
/// (Pending when `None`), Ready or not.
fn member(s: u32, m: u32, index: u32, node: Option<&str>, ready: bool) -> Pod {
    let node = node.map(|n| format!("nodeName: {n}, ")).unwrap_or_default();
    let status = if ready { "'True'" } else { "'False'" };
    pod(&format!(
        "metadata:
           name: cache-{s}-{m}-{index}
           namespace: prod
           uid: uid-{s}-{m}-{index}
           labels: {{valkey.rs/cluster: cache, valkey.rs/shard: '{s}', valkey.rs/member: '{m}', apps.kubernetes.io/pod-index: '{index}'}}
         spec: {{{node}containers: [{{name: valkey}}]}}
         status: {{conditions: [{{type: Ready, status: {status}}}]}}"
    ))
}

fn sts(s: u32, m: u32, start: i32, replicas: i32) -> StatefulSet {
    let mut labels = BTreeMap::new();
    labels.insert("valkey.rs/shard".to_string(), s.to_string());
    labels.insert("valkey.rs/member".to_string(), m.to_string());
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(format!("cache-{s}-{m}")),
            uid: Some(format!("sts-{s}-{m}")),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            ordinals: Some(StatefulSetOrdinals { start: Some(start) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pvc(name: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn not_ready_node(name: &str, since: &str) -> Node {
    resources::adapt::fixtures::node(&format!(
        "metadata:
           name: {name}
           labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: z}}
         status:
           conditions: [{{type: Ready, status: 'False', lastTransitionTime: '{since}'}}]"
    ))
}

/// A view of cluster `cache` with these member pods and StatefulSets.
fn view(pods: Vec<Pod>, statefulsets: Vec<StatefulSet>, nodes: Vec<Node>) -> KubeView {
    let c = cluster("shards: 3\nreplicas: 1");
    let statefulsets: BTreeMap<String, StatefulSet> = statefulsets
        .into_iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), s))
        .collect();
    let sorted = crate::view::sort_members(&c, &statefulsets, &pods);
    KubeView {
        nodes: nodes.into_iter().map(std::sync::Arc::new).collect(),
        all_pods: pods.into_iter().map(std::sync::Arc::new).collect(),
        members: sorted.members,
        new_copies: sorted.new_copies,
        condemned: sorted.condemned,
        statefulsets,
        ..Default::default()
    }
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

#[test]
fn budgets_of_shards_without_pods_go_and_all_go_when_turned_off() {
    let mut c = cluster("shards: 1\nreplicas: 1");
    let mut v = view(vec![member(0, 0, 0, Some("n1"), true)], vec![], vec![]);
    for name in ["cache-0", "cache-1", "cache-2"] {
        let pdb = PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        v.pdbs.insert(name.into(), pdb);
    }
    let desired = super::objects(&c, &owner(), &Placement::Failed("x".into()), &v);
    // Shard 0 is wanted; shards 1 and 2 have neither a spec nor a pod.
    assert_eq!(
        cleanup::orphaned_pdbs(&c, &desired, &v),
        ["cache-1", "cache-2"]
    );
    c.pod_disruption_budget = false;
    let desired = super::objects(&c, &owner(), &Placement::Failed("x".into()), &v);
    assert_eq!(
        cleanup::orphaned_pdbs(&c, &desired, &v),
        ["cache-0", "cache-1", "cache-2"]
    );
}

#[test]
fn the_members_network_policy_goes_when_turned_off_and_stays_while_wanted() {
    let mut c = cluster("shards: 1\nreplicas: 1");
    let mut v = view(vec![member(0, 0, 0, Some("n1"), true)], vec![], vec![]);
    for name in ["cache-members", "cache-old"] {
        let policy = k8s_openapi::api::networking::v1::NetworkPolicy {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        v.network_policies.insert(name.into(), policy);
    }
    c.network_policy.enabled = Some(true);
    let desired = super::objects(&c, &owner(), &Placement::Failed("x".into()), &v);
    assert_eq!(
        cleanup::orphaned_network_policy(&desired, &v),
        ["cache-old"]
    );
    c.network_policy.enabled = Some(false);
    let desired = super::objects(&c, &owner(), &Placement::Failed("x".into()), &v);
    assert_eq!(
        cleanup::orphaned_network_policy(&desired, &v),
        ["cache-members", "cache-old"]
    );
}

#[test]
fn a_leaving_member_goes_when_the_planner_says_so_or_when_it_never_joined_nor_ran() {
    let c = cluster("shards: 1\nreplicas: 0");
    // Shard 0 member 1 and shard 1 member 0 are leaving (scale-in).
    let v = view(
        vec![
            member(0, 1, 0, Some("n1"), true),
            member(1, 0, 0, None, false),
        ],
        vec![sts(0, 0, 0, 1), sts(0, 1, 0, 1), sts(1, 0, 0, 1)],
        vec![],
    );
    let none = BTreeSet::new();
    let names = |l: Vec<cleanup::Leaving>| -> Vec<String> {
        l.into_iter().map(|l| l.statefulset.name).collect()
    };
    // The running one waits for the planner; the Pending one that never
    // joined goes at once.
    assert_eq!(
        names(cleanup::leaving_members(&c, &v, &[], &none)),
        ["cache-1-0"]
    );
    // Once joined (a node id recorded), a Pending pod is no proof of no data.
    let joined = BTreeSet::from([(1, 0)]);
    assert!(cleanup::leaving_members(&c, &v, &[], &joined).is_empty());
    let removable = [MemberRef::new(0, 1)];
    let l = cleanup::leaving_members(&c, &v, &removable, &joined);
    assert_eq!(names(l.clone()), ["cache-0-1"]);
    assert_eq!(l[0].statefulset.uid.as_deref(), Some("sts-0-1"));
}

#[test]
fn volumes_below_a_moved_members_start_are_swept_and_no_others() {
    let c = cluster("shards: 1\nreplicas: 0\npersistence: {size: 1Gi, reclaimPolicy: Retain}");
    let mut v = view(vec![], vec![sts(0, 0, 2, 1)], vec![]);
    for name in [
        "data-cache-0-0-0",
        "data-cache-0-0-1",
        "data-cache-0-0-2",
        "data-cache-0-0-3",
    ] {
        v.pvcs.insert(name.into(), pvc(name));
    }
    let swept: Vec<String> = cleanup::moved_volumes(&c, &v, |_, _| true)
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(swept, ["data-cache-0-0-0", "data-cache-0-0-1"]);
    assert_eq!(claim_of("cache-0-0-2"), "data-cache-0-0-2");
    // Not while the member's current copy does not hold the shard's data
    // (neither the live primary nor a replica in sync).
    assert!(cleanup::moved_volumes(&c, &v, |_, _| false).is_empty());
    // Without persistence nothing is swept.
    let c = cluster("shards: 1\nreplicas: 0");
    assert!(cleanup::moved_volumes(&c, &v, |_, _| true).is_empty());
}

#[test]
fn a_volume_size_the_api_server_refused_is_not_asked_for_again() {
    let c = cluster("shards: 1\nreplicas: 0\npersistence: {size: 2Gi, reclaimPolicy: Retain}");
    let mut v = view(vec![], vec![], vec![]);
    let mut small = pvc("data-cache-0-0-0");
    small.spec = Some(serde_saphyr::from_str("resources: {requests: {storage: 1Gi}}").unwrap());
    let mut big = pvc("data-cache-0-0-1");
    big.spec = Some(serde_saphyr::from_str("resources: {requests: {storage: 2Gi}}").unwrap());
    v.pvcs.insert("data-cache-0-0-0".into(), small);
    v.pvcs.insert("data-cache-0-0-1".into(), big);
    assert_eq!(cleanup::volumes_to_grow(&c, &v, None), ["data-cache-0-0-0"]);
    assert!(cleanup::volumes_to_grow(&c, &v, Some("2Gi")).is_empty());
    assert_eq!(cleanup::volumes_to_grow(&c, &v, Some("1Gi")).len(), 1);
}

#[test]
fn members_on_a_lost_node_are_found_with_how_long_it_has_been_lost() {
    let c = cluster("shards: 1\nreplicas: 1");
    let v = view(
        vec![
            member(0, 0, 0, Some("n1"), true),
            member(0, 1, 0, Some("n2"), false),
        ],
        vec![],
        vec![
            ready_node("n1", "a"),
            not_ready_node("n2", "2026-01-01T00:09:30Z"),
        ],
    );
    let observed = ObservedCluster::default();
    let f = Facts::new(&c, &v, &observed, now());
    assert_eq!(f.node_lost_for("n1"), None);
    assert_eq!(f.node_lost_for("n2"), Some(Duration::from_secs(30)));
    let lost = heal::lost_members(&f);
    assert_eq!(lost.len(), 1);
    assert_eq!((lost[0].shard, lost[0].member), (0, 1));
    // Nobody answered as the primary: the lost member may hold the last copy.
    assert!(!lost[0].shard_served_elsewhere);
    let decisions = heal::decide(&lost, false, Duration::ZERO);
    assert!(matches!(decisions[0], Heal::Wait { .. }));
}

#[test]
fn a_node_without_a_node_object_counts_as_lost_from_when_it_was_first_missed() {
    let mut v = view(vec![member(0, 0, 0, Some("gone"), true)], vec![], vec![]);
    let mut memory = Memory::default();
    let t0 = Instant::now();
    memory.note_missing_nodes(&mut v, t0);
    assert_eq!(v.missing_nodes.get("gone"), Some(&Duration::ZERO));
    let mut again = v.clone();
    again.missing_nodes.clear();
    memory.note_missing_nodes(&mut again, t0 + Duration::from_secs(25));
    assert_eq!(
        again.missing_nodes.get("gone"),
        Some(&Duration::from_secs(25))
    );
    let c = cluster("shards: 1\nreplicas: 1");
    let observed = ObservedCluster::default();
    let f = Facts::new(&c, &again, &observed, now());
    assert_eq!(f.node_lost_for("gone"), Some(Duration::from_secs(25)));
}

#[test]
fn the_old_copy_of_a_finished_move_on_a_lost_node_is_stranded() {
    let c = cluster("shards: 1\nreplicas: 0");
    // The move finished (start 1): pod index 0 is condemned.
    let v = view(
        vec![
            member(0, 0, 0, Some("lost"), true),
            member(0, 0, 1, Some("n1"), true),
        ],
        vec![sts(0, 0, 1, 1)],
        vec![
            ready_node("n1", "a"),
            not_ready_node("lost", "2026-01-01T00:00:00Z"),
        ],
    );
    let observed = ObservedCluster::default();
    let f = Facts::new(&c, &v, &observed, now());
    let stranded: Vec<_> = cleanup::stranded_copies(&f)
        .into_iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(stranded, ["cache-0-0-0"]);
    assert_eq!(
        moves::move_in_flight(&[], &v).as_deref(),
        Some("a member is moving (shard 0 member 0: its old copy, pod cache-0-0-0, is going)")
    );
}

#[test]
fn a_move_in_flight_is_told_with_its_member_and_step() {
    let mv = Move {
        shard: 1,
        member: 2,
        ordinals: Ordinals {
            start: 0,
            replicas: 2,
        },
        pod: None,
        old_is_primary: false,
        served_elsewhere: true,
        still_wanted: true,
    };
    let v = view(vec![], vec![], vec![]);
    let wait = [(mv.clone(), MoveStep::Wait("its new copy is Pending".into()))];
    assert_eq!(
        moves::move_in_flight(&wait, &v).as_deref(),
        Some("a member is moving (shard 1 member 2: its new copy is Pending)")
    );
    let c = cluster("shards: 2\nreplicas: 2");
    let observed = ObservedCluster::default();
    let f = Facts::new(&c, &v, &observed, now());
    let lines = moves::move_lines(&f, &Placement::Failed("x".into()), &wait);
    assert_eq!(
        lines,
        [
            "shard 1 member 2: moving from node <none> to where the plan puts it (its new copy is Pending)"
        ]
    );
    assert!(moves::move_in_flight(&[], &v).is_none());
}

#[test]
fn a_blocked_rolling_update_and_waiting_heals_are_announced_once() {
    let mut announced = Announced::default();
    let blocked = RollStep::Blocked("shard 0 has no replica".into());
    assert_eq!(rolling::blocked_note(&blocked, &mut announced).len(), 1);
    assert!(rolling::blocked_note(&blocked, &mut announced).is_empty());
    assert!(rolling::blocked_note(&RollStep::Done, &mut announced).is_empty());

    let wait = [Heal::Wait {
        shard: 0,
        member: 1,
        reason: "r".into(),
    }];
    let notes = heal::waiting_note(&wait, &mut announced);
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].text, "shard 0 member 1: r");
    assert!(heal::waiting_note(&wait, &mut announced).is_empty());
    // Nobody lost any more: announced again when it comes back.
    assert!(heal::waiting_note(&[], &mut announced).is_empty());
    assert_eq!(heal::waiting_note(&wait, &mut announced).len(), 1);
}

#[test]
fn a_failed_placement_leaves_every_member_unplanned() {
    let p = Placement::Failed("x".into());
    assert_eq!(p.member(0, 0), MemberPlacement::Unplanned);
    assert!(!p.moved(0, 0));
    assert_eq!(p.node_of(0, 0), "<unplanned>");
}

#[test]
fn a_big_cluster_bootstraps_with_a_longer_node_timeout() {
    use super::bootstrap_node_timeout_ms as t;
    use resources::config::{BOOTSTRAP_NODE_TIMEOUT_MS, CLUSTER_NODE_TIMEOUT_MS};
    // The suites' clusters (3x1, 3x2, 4x2) keep the short one.
    for members in [1, 2, 6, 9, 12, 22] {
        assert_eq!(t(members), BOOTSTRAP_NODE_TIMEOUT_MS, "{members}");
    }
    // 40 members ping 3,120 times a second at 1 s: 3.12 s keeps 1,000.
    assert_eq!(t(40), 3120);
    // 120 members (40x2): the normal timeout, as steady.
    for members in [51, 120, 1000, usize::MAX] {
        assert_eq!(t(members), CLUSTER_NODE_TIMEOUT_MS, "{members}");
    }
}

#[test]
fn only_an_empty_cluster_that_was_never_ready_gets_the_short_node_timeout() {
    use resources::config::{BOOTSTRAP_NODE_TIMEOUT_MS, CLUSTER_NODE_TIMEOUT_MS};
    use valkey::model::{MemberState, NodeReport, ObservedMember};
    use valkey::parse::{ClusterNodes, ReplicationInfo, Role};
    let member = |keys: Option<u64>| {
        ObservedMember {
        member: MemberRef::new(0, 0),
        addr: None,
        known_node_id: None,
        former_node_ids: Vec::new(),
        state: match keys {
            Some(keys) => MemberState::Reachable(Box::new(NodeReport {
                nodes: ClusterNodes::parse(
                    "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 10.0.0.1:6379@16379 myself,master - 0 0 0 connected",
                )
                .unwrap(),
                replication: ReplicationInfo {
                    role: Role::Primary,
                    repl_offset: 0,
                    connected_replicas: 0,
                    replicas: Vec::new(),
                    primary_link: None,
                },
                slot_migrations: Vec::new(),
                keys,
                config: BTreeMap::new(),
                cluster_state_ok: false,
                version: None,
                modules: Vec::new(),
            })),
            None => MemberState::Unreachable {
                reason: "not up yet".into(),
            },
        },
    }
    };
    let of = |members: Vec<ObservedMember>| ObservedCluster { members };
    let fresh = of(vec![member(Some(0)), member(Some(0))]);
    assert_eq!(
        super::node_timeout_ms(&fresh, true),
        BOOTSTRAP_NODE_TIMEOUT_MS
    );
    // Ready once (or Ready now): the normal timeout for good.
    assert_eq!(
        super::node_timeout_ms(&fresh, false),
        CLUSTER_NODE_TIMEOUT_MS
    );
    // A key anywhere, or a member that does not answer (it might hold some).
    let data = of(vec![member(Some(0)), member(Some(3))]);
    assert_eq!(super::node_timeout_ms(&data, true), CLUSTER_NODE_TIMEOUT_MS);
    let silent = of(vec![member(Some(0)), member(None)]);
    assert_eq!(
        super::node_timeout_ms(&silent, true),
        CLUSTER_NODE_TIMEOUT_MS
    );
}
