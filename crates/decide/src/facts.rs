//! Facts: what one reconcile knows once Kubernetes and Valkey are observed,
//! derived once and read by every decision (pure, `now` passed in).
//!
//! Each rule that reads the live cluster is written here once: the live
//! primary of a shard, whether a node is lost and for how long, whether a
//! shard is served without a given member, a member's zone, a volume's claim
//! name. The decisions in [`crate`] take a [`Facts`] and never ask
//! Kubernetes or Valkey themselves.

use crate::pods::PodFacts;
use crate::view::KubeView;
use api::ValidatedCluster;
use api::v1alpha1::ValkeyClusterStatus;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube_core::ResourceExt;
use resources::adapt;
use resources::statefulset::Ordinals;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use valkey::model::{
    MemberIndex, MemberRef, NodeReport, ObservedCluster, ObservedMember, ShardIndex,
};
use valkey::parse::Role;
use valkey::planner::{self, PlannerOptions};

/// The observed cluster, with what is derived from it once.
pub struct Facts<'a> {
    pub cluster: &'a ValidatedCluster,
    pub kube: &'a KubeView,
    pub valkey: &'a ObservedCluster,
    /// The wall clock of this reconcile (how long a node has been NotReady).
    pub now: Timestamp,
    /// The constraint keys, widest first, the node last.
    pub keys: Vec<String>,
    /// The live primary of each shard (see [`live_primaries`]).
    pub primaries: BTreeMap<u32, u32>,
    /// Each shard as failover preference and primary balancing see it.
    pub shards: Vec<ShardView>,
    /// Members that started with another password than the one they
    /// should run (`observe::valkey::password_stale`): restarted like
    /// members of an outdated template.
    pub password_stale: std::collections::BTreeSet<(u32, u32)>,
}

impl<'a> Facts<'a> {
    pub fn new(
        cluster: &'a ValidatedCluster,
        kube: &'a KubeView,
        valkey: &'a ObservedCluster,
        now: Timestamp,
    ) -> Facts<'a> {
        let keys = topology_keys(cluster, kube);
        let primaries = live_primaries(cluster, valkey);
        let mut facts = Facts {
            cluster,
            kube,
            valkey,
            now,
            keys,
            primaries,
            shards: Vec::new(),
            password_stale: std::collections::BTreeSet::new(),
        };
        facts.shards = facts.shard_views();
        facts
    }

    /// What member `(s, m)` said, when it answered.
    pub fn report(&self, s: u32, m: u32) -> Option<&'a NodeReport> {
        self.report_at(s, MemberIndex::Member(m))
    }

    /// What member or new copy `index` of shard `s` said, when it answered.
    pub fn report_at(&self, s: u32, index: MemberIndex) -> Option<&'a NodeReport> {
        report_at(self.valkey, s, index)
    }

    /// The primary of shard `s` as Valkey reports it.
    pub fn primary_report(&self, s: u32) -> Option<&'a NodeReport> {
        self.primaries.get(&s).and_then(|p| self.report(s, *p))
    }

    /// How long `node` has been lost: `Some(d)` when its Ready condition has
    /// not been True for `d`, or its Node object has been gone for `d` (as
    /// long as the operator has seen it gone); `None` when it is Ready.
    pub fn node_lost_for(&self, node: &str) -> Option<Duration> {
        node_lost_for(self.kube, node, self.now)
    }

    /// Whether the node of a pod is lost past the grace after which members
    /// are re-created elsewhere.
    pub fn on_lost_node(&self, pod: &PodFacts) -> bool {
        pod.node
            .as_deref()
            .and_then(|n| self.node_lost_for(n))
            .is_some_and(|d| d >= NODE_LOST_GRACE)
    }

    /// Whether shard `s`'s live primary is a member other than `not` whose
    /// pod sits on a node that is not lost (the shard is served without `not`).
    pub fn served_elsewhere(&self, s: u32, not: MemberIndex) -> bool {
        self.primaries.get(&s).is_some_and(|p| {
            MemberIndex::Member(*p) != not
                && self
                    .kube
                    .members
                    .get(&(s, *p))
                    .and_then(|pod| PodFacts::of(pod).node)
                    .is_some_and(|n| self.node_lost_for(&n).is_none())
        })
    }

    /// Whether a replica is in sync with shard `s`'s live primary: it follows
    /// that primary and its replication offset is close enough.
    fn in_sync_with_primary(&self, s: u32, replica: &NodeReport) -> bool {
        self.primary_report(s).is_some_and(|p| {
            planner::sync_between(p, replica, PlannerOptions::default().max_replica_lag_bytes)
                .is_in_sync()
        })
    }

    /// Whether member `(s, m)` is an in-sync replica of the shard's live
    /// primary.
    pub fn in_sync(&self, s: u32, m: u32) -> bool {
        self.in_sync_at(s, MemberIndex::Member(m))
    }

    /// Whether member or new copy `index` of shard `s` is an in-sync replica
    /// of the shard's live primary.
    pub fn in_sync_at(&self, s: u32, index: MemberIndex) -> bool {
        self.report_at(s, index)
            .is_some_and(|r| self.in_sync_with_primary(s, r))
    }

    fn shard_views(&self) -> Vec<ShardView> {
        (0..self.cluster.shards)
            .map(|s| {
                let primary = self.primaries.get(&s).copied();
                let members = (0..=self.cluster.replicas)
                    .map(|m| Candidate {
                        member: m,
                        domains: member_domains(
                            self.kube,
                            self.kube.members.get(&(s, m)),
                            &self.keys,
                        ),
                        in_sync: Some(m) == primary || self.in_sync(s, m),
                    })
                    .collect();
                ShardView {
                    shard: s,
                    primary,
                    members,
                }
            })
            .collect()
    }
}

/// What member `(s, m)` of `obs` said, when it answered.
pub fn report_of(obs: &ObservedCluster, s: u32, m: u32) -> Option<&NodeReport> {
    report_at(obs, s, MemberIndex::Member(m))
}

/// What member or new copy `index` of shard `s` said, when it answered.
pub fn report_at(obs: &ObservedCluster, s: u32, index: MemberIndex) -> Option<&NodeReport> {
    let want = MemberRef {
        shard: ShardIndex(s),
        member: index,
    };
    obs.members
        .iter()
        .find(|x| x.member == want)
        .and_then(ObservedMember::report)
}

/// Whether a member says it is a primary serving slots.
pub fn serves_slots(r: &NodeReport) -> bool {
    r.role() == Role::Primary && !r.nodes.myself().slots.is_empty()
}

/// The live primary of each shard: the member that says it is a primary and
/// serves slots.
pub fn live_primaries(cluster: &ValidatedCluster, obs: &ObservedCluster) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for s in 0..cluster.shards {
        let with_slots =
            (0..=cluster.replicas).find(|m| report_of(obs, s, *m).is_some_and(serves_slots));
        if let Some(m) = with_slots {
            out.insert(s, m);
        }
    }
    out
}

/// The constraint keys, widest first, the node last.
fn topology_keys(cluster: &ValidatedCluster, view: &KubeView) -> Vec<String> {
    let keys: Vec<String> = cluster
        .spread
        .iter()
        .map(|c| c.topology_key.clone())
        .collect();
    let labels: Vec<&BTreeMap<String, String>> = view
        .nodes
        .iter()
        .filter_map(|n| n.metadata.labels.as_ref())
        .collect();
    keys_widest_first(&keys, &labels)
}

fn member_domains(view: &KubeView, pod: Option<&Pod>, keys: &[String]) -> Option<Domains> {
    let node = PodFacts::of(pod?).node?;
    let labels = view.node_labels(&node)?;
    Some(
        keys.iter()
            .filter_map(|k| labels.get(k).map(|v| (k.clone(), v.clone())))
            .collect(),
    )
}

/// The zone of the node `pod` runs on.
pub fn zone_of(view: &KubeView, pod: &Pod) -> Option<String> {
    PodFacts::of(pod).node.and_then(|n| {
        view.node_labels(&n)
            .and_then(|l| l.get(placement::ZONE_KEY))
            .cloned()
    })
}

/// See [`Facts::node_lost_for`].
pub fn node_lost_for(view: &KubeView, node: &str, now: Timestamp) -> Option<Duration> {
    let Some(n) = view
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
    else {
        return Some(
            view.missing_nodes
                .get(node)
                .copied()
                .unwrap_or(Duration::ZERO),
        );
    };
    if adapt::nodes::is_ready(n) {
        return None;
    }
    let since = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let lost_for = since
        .map(|t| now.duration_since(t))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or(Duration::ZERO);
    Some(lost_for)
}

/// Every (shard, member) of the spec.
pub fn desired_members(c: &ValidatedCluster) -> impl Iterator<Item = (u32, u32)> + '_ {
    (0..c.shards).flat_map(move |s| (0..=c.replicas).map(move |m| (s, m)))
}

/// The (shard, member) a member StatefulSet's labels name.
pub fn member_of(sts: &StatefulSet) -> Option<(u32, u32)> {
    let labels = sts.labels();
    let parse = |k: &str| labels.get(k).and_then(|v| v.parse::<u32>().ok());
    Some((
        parse(api::constants::LABEL_SHARD)?,
        parse(api::constants::LABEL_MEMBER)?,
    ))
}

pub use resources::adapt::pods::node_of;
pub use resources::statefulset::claim_of;

/// The claims of StatefulSet `sts`'s pods, by pod ordinal.
pub fn claims_by_ordinal<'v>(
    view: &'v KubeView,
    sts: &str,
) -> impl Iterator<Item = (u32, &'v k8s_openapi::api::core::v1::PersistentVolumeClaim)> + 'v {
    let prefix = claim_of(&format!("{sts}-"));
    view.pvcs.iter().filter_map(move |(claim, pvc)| {
        Some((claim.strip_prefix(&prefix)?.parse::<u32>().ok()?, pvc))
    })
}

/// Where a member StatefulSet that is (re-)created starts: at the volume a
/// removed member left behind (the highest ordinal claimed), so a member
/// added back finds its data as before moves existed; else at 0.
pub fn retained_start(view: &KubeView, sts: &str) -> Option<Ordinals> {
    claims_by_ordinal(view, sts)
        .filter(|(_, pvc)| pvc.metadata.deletion_timestamp.is_none())
        .map(|(start, _)| start)
        .max()
        .map(|start| Ordinals { start, replicas: 1 })
}

/// Members a node id was ever recorded for (in status): they joined the
/// cluster and may hold slots or data, whatever their pod does now.
pub fn recorded_members(old_status: Option<&ValkeyClusterStatus>) -> BTreeSet<(u32, u32)> {
    old_status
        .map(|st| {
            st.members
                .iter()
                .filter(|m| m.node_id.is_some())
                .filter_map(|m| Some((u32::try_from(m.shard).ok()?, u32::try_from(m.member).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The domain values of one member's node, by topology key (absent key: the
/// node lacks that label; such nodes share one domain, as in the planner).
pub type Domains = BTreeMap<String, String>;

/// One member that could be primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub member: u32,
    /// `None` while the member's node is unknown (Pending or unreachable).
    pub domains: Option<Domains>,
    /// An in-sync replica (or the live primary itself).
    pub in_sync: bool,
}

/// One shard as balancing sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    pub shard: u32,
    /// The live primary's member index, when there is one.
    pub primary: Option<u32>,
    pub members: Vec<Candidate>,
}

/// Orders topology keys from the widest to the narrowest (fewest distinct
/// values first), and appends the hostname key when absent.
pub fn keys_widest_first(
    keys: &[String],
    node_labels: &[&BTreeMap<String, String>],
) -> Vec<String> {
    let mut out: Vec<(usize, String)> = keys
        .iter()
        .map(|k| {
            let mut values: Vec<Option<&String>> = node_labels.iter().map(|l| l.get(k)).collect();
            values.sort();
            values.dedup();
            (values.len(), k.clone())
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.1 == b.1);
    let mut keys: Vec<String> = out.into_iter().map(|(_, k)| k).collect();
    let host = placement::HOSTNAME_KEY.to_string();
    keys.retain(|k| *k != host);
    keys.push(host);
    keys
}

/// How long a node must be NotReady (or gone) before its members are
/// re-created elsewhere. Valkey has long failed over by then (the
/// cluster-node-timeout is 5 s); the grace keeps a blip from moving members.
pub const NODE_LOST_GRACE: Duration = Duration::from_secs(20);
