//! From a member's planned placement to the affinity rules of its pod, so that
//! the real kube-scheduler keeps the plan.
//!
//! - Required constraint: required node affinity to the planned node's domain
//!   for that key (the scheduler cannot put the pod in another domain); for
//!   `maxReplicas: 1` also required pod anti-affinity against the other members
//!   of the shard on that key, which holds even if the plan was made on stale
//!   data. The member's own pods are left out of these terms: while a member
//!   moves, its new copy runs beside the old one, which goes once the new one
//!   is in sync, so the two must not keep each other out of a domain.
//! - Preferred constraint: preferred node affinity to the planned domain, and
//!   for `maxReplicas: 1` preferred pod anti-affinity against the shard.
//!   (Anti-affinity says "no other member of my shard there", i.e. a limit of
//!   one; a larger limit is expressed by the planned domain alone.)
//! - A preferred node affinity, highest weight, to the planned node itself.
//! - The user's `scheduling.affinity` is merged in: node selector terms are
//!   ORed by Kubernetes and expressions inside a term ANDed, so the operator's
//!   required expressions go into *every* user term; pod (anti-)affinity terms
//!   and preferred terms are appended.
//!
//! A member the planner cannot place gets a required node affinity no node
//! satisfies (key [`UNPLACEABLE_KEY`]), so its pod stays Pending and the status
//! says why, instead of the scheduler putting it somewhere the plan forbids.

use api::constants::{LABEL_MEMBER, LABEL_SHARD};
use api::v1alpha1::{ResolvedSpreadConstraint, SpreadMode};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::BTreeMap;

/// A node label no node carries: required node affinity on it keeps an
/// unplaceable member's pod Pending.
pub const UNPLACEABLE_KEY: &str = "valkey.rs/unplaceable";

/// Weight of the preferred node affinity to the planned node (the maximum).
pub const WEIGHT_PLANNED_NODE: i32 = 100;
/// Weight of preferred pod anti-affinity of a Preferred `maxReplicas: 1` constraint.
pub const WEIGHT_PREFERRED_SPREAD: i32 = 50;
/// Weight of preferred node affinity to the planned domain of a Preferred constraint.
pub const WEIGHT_PREFERRED_DOMAIN: i32 = 30;

/// Where the planner put one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberPlacement {
    /// On `node`, with the node's domain for every constraint key (`None`:
    /// the node lacks a Preferred constraint's key).
    Placed {
        node: String,
        domains: BTreeMap<String, Option<String>>,
    },
    /// The planner could not place it; `reason` in plain words.
    Unplaced { reason: String },
    /// No plan (the planner failed): only the constraints themselves apply,
    /// as required/preferred pod anti-affinity, and the user's rules.
    Unplanned,
}

/// The affinity of the pod of member `shard` of `cluster`.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn affinity(
    (kind, cluster): (api::SetKind, &str),
    shard: u32,
    member: u32,
    constraints: &[ResolvedSpreadConstraint],
    placement: &MemberPlacement,
    user: Option<&Affinity>,
) -> Option<Affinity> {
    let mut required: Vec<NodeSelectorRequirement> = Vec::new();
    let mut preferred_nodes: Vec<PreferredSchedulingTerm> = Vec::new();
    let mut required_anti: Vec<PodAffinityTerm> = Vec::new();
    let mut preferred_anti: Vec<WeightedPodAffinityTerm> = Vec::new();

    match placement {
        Placed { node, domains } => {
            preferred_nodes.push(PreferredSchedulingTerm {
                weight: WEIGHT_PLANNED_NODE,
                preference: NodeSelectorTerm {
                    match_fields: Some(vec![requirement("metadata.name", node)]),
                    ..Default::default()
                },
            });
            for c in constraints {
                let domain = domains.get(&c.topology_key).cloned().flatten();
                match (c.mode, domain) {
                    (SpreadMode::Required, Some(value)) => {
                        required.push(requirement(&c.topology_key, &value));
                    }
                    (SpreadMode::Required, None) => {
                        // The planner never places a member on a node without
                        // a Required key; if it did, at least demand the key.
                        required.push(NodeSelectorRequirement {
                            key: c.topology_key.clone(),
                            operator: "Exists".into(),
                            values: None,
                        });
                    }
                    (SpreadMode::Preferred, Some(value)) => {
                        preferred_nodes.push(PreferredSchedulingTerm {
                            weight: WEIGHT_PREFERRED_DOMAIN,
                            preference: NodeSelectorTerm {
                                match_expressions: Some(vec![requirement(&c.topology_key, &value)]),
                                ..Default::default()
                            },
                        });
                    }
                    // Planned onto the nodes lacking the key: nothing to prefer.
                    (SpreadMode::Preferred, None) => {}
                }
            }
        }
        Unplaced { .. } => required.push(NodeSelectorRequirement {
            key: UNPLACEABLE_KEY.into(),
            operator: "Exists".into(),
            values: None,
        }),
        Unplanned => {}
    }
    for c in constraints.iter().filter(|c| c.max_replicas == 1) {
        let term = shard_term((kind, cluster), shard, member, &c.topology_key);
        match c.mode {
            SpreadMode::Required => required_anti.push(term),
            SpreadMode::Preferred => preferred_anti.push(WeightedPodAffinityTerm {
                weight: WEIGHT_PREFERRED_SPREAD,
                pod_affinity_term: term,
            }),
        }
    }

    let user = user.cloned().unwrap_or_default();
    let user_node = user.node_affinity.clone().unwrap_or_default();
    let node_affinity = NodeAffinity {
        required_during_scheduling_ignored_during_execution: merge_required(
            user_node.required_during_scheduling_ignored_during_execution,
            &required,
        ),
        preferred_during_scheduling_ignored_during_execution: non_empty(
            preferred_nodes
                .into_iter()
                .chain(
                    user_node
                        .preferred_during_scheduling_ignored_during_execution
                        .into_iter()
                        .flatten(),
                )
                .collect(),
        ),
    };
    let user_anti = user.pod_anti_affinity.clone().unwrap_or_default();
    let pod_anti_affinity = PodAntiAffinity {
        required_during_scheduling_ignored_during_execution: non_empty(
            required_anti
                .into_iter()
                .chain(
                    user_anti
                        .required_during_scheduling_ignored_during_execution
                        .into_iter()
                        .flatten(),
                )
                .collect(),
        ),
        preferred_during_scheduling_ignored_during_execution: non_empty(
            preferred_anti
                .into_iter()
                .chain(
                    user_anti
                        .preferred_during_scheduling_ignored_during_execution
                        .into_iter()
                        .flatten(),
                )
                .collect(),
        ),
    };
    let affinity = Affinity {
        node_affinity: (node_affinity != NodeAffinity::default()).then_some(node_affinity),
        pod_affinity: user.pod_affinity,
        pod_anti_affinity: (pod_anti_affinity != PodAntiAffinity::default())
            .then_some(pod_anti_affinity),
    };
    (affinity != Affinity::default()).then_some(affinity)
}

use MemberPlacement::{Placed, Unplaced, Unplanned};

/// The operator's required expressions ANDed into every user term (terms are
/// ORed, so adding them to only one term would let the others escape).
fn merge_required(
    user: Option<NodeSelector>,
    ours: &[NodeSelectorRequirement],
) -> Option<NodeSelector> {
    let user_terms = user.map(|s| s.node_selector_terms).unwrap_or_default();
    if ours.is_empty() {
        return (!user_terms.is_empty()).then_some(NodeSelector {
            node_selector_terms: user_terms,
        });
    }
    let terms = if user_terms.is_empty() {
        vec![NodeSelectorTerm {
            match_expressions: Some(ours.to_vec()),
            match_fields: None,
        }]
    } else {
        user_terms
            .into_iter()
            .map(|mut t| {
                let mut exprs = t.match_expressions.take().unwrap_or_default();
                exprs.extend(ours.iter().cloned());
                t.match_expressions = Some(exprs);
                t
            })
            .collect()
    };
    Some(NodeSelector {
        node_selector_terms: terms,
    })
}

fn requirement(key: &str, value: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: Some(vec![value.into()]),
    }
}

/// "Pods of this cluster's shard `shard`, in the same `topology_key` domain."
/// The other members of the shard (never the member's own pods).
fn shard_term(
    (kind, cluster): (api::SetKind, &str),
    shard: u32,
    member: u32,
    topology_key: &str,
) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([
                (kind.label().to_string(), cluster.to_string()),
                (LABEL_SHARD.to_string(), shard.to_string()),
            ])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: LABEL_MEMBER.to_string(),
                operator: "NotIn".into(),
                values: Some(vec![member.to_string()]),
            }]),
        }),
        topology_key: topology_key.into(),
        ..Default::default()
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::constants::LABEL_CLUSTER;
    use api::v1alpha1::validation::{HOSTNAME_KEY, ZONE_KEY};

    fn constraint(key: &str, max: u32, mode: SpreadMode) -> ResolvedSpreadConstraint {
        ResolvedSpreadConstraint {
            topology_key: key.into(),
            max_replicas: max,
            mode,
        }
    }

    fn placed(node: &str, zone: Option<&str>) -> MemberPlacement {
        Placed {
            node: node.into(),
            domains: BTreeMap::from([
                (HOSTNAME_KEY.to_string(), Some(node.to_string())),
                (ZONE_KEY.to_string(), zone.map(str::to_string)),
            ]),
        }
    }

    fn required_exprs(a: &Affinity) -> Vec<Vec<(String, String, Vec<String>)>> {
        a.node_affinity
            .as_ref()
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|s| {
                s.node_selector_terms
                    .iter()
                    .map(|t| {
                        t.match_expressions
                            .iter()
                            .flatten()
                            .map(|e| {
                                (
                                    e.key.clone(),
                                    e.operator.clone(),
                                    e.values.clone().unwrap_or_default(),
                                )
                            })
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_required_constraint_pins_the_pod_to_its_planned_domain() {
        let cs = [constraint(ZONE_KEY, 2, SpreadMode::Required)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            0,
            0,
            &cs,
            &placed("n1", Some("a")),
            None,
        )
        .unwrap();
        assert_eq!(
            required_exprs(&a),
            vec![vec![(
                ZONE_KEY.to_string(),
                "In".to_string(),
                vec!["a".to_string()]
            )]]
        );
        // maxReplicas 2: no anti-affinity (it would mean at most one).
        assert!(a.pod_anti_affinity.is_none());
    }

    #[test]
    fn required_max_one_adds_required_anti_affinity_against_the_shard() {
        let cs = [constraint(HOSTNAME_KEY, 1, SpreadMode::Required)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            2,
            0,
            &cs,
            &placed("n1", None),
            None,
        )
        .unwrap();
        let anti = a.pod_anti_affinity.unwrap();
        let terms = anti
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].topology_key, HOSTNAME_KEY);
        let labels = terms[0]
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        assert_eq!(labels.get(LABEL_CLUSTER).map(String::as_str), Some("c"));
        assert_eq!(labels.get(LABEL_SHARD).map(String::as_str), Some("2"));
        assert!(
            anti.preferred_during_scheduling_ignored_during_execution
                .is_none()
        );
    }

    #[test]
    fn anti_affinity_leaves_out_the_members_own_pods_so_its_new_copy_may_share_a_domain() {
        let cs = [constraint(ZONE_KEY, 1, SpreadMode::Required)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            0,
            3,
            &cs,
            &placed("n1", Some("a")),
            None,
        )
        .unwrap();
        let terms = a
            .pod_anti_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        let exprs = terms[0]
            .label_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .clone()
            .unwrap();
        assert_eq!(exprs.len(), 1);
        assert_eq!(exprs[0].key, LABEL_MEMBER);
        assert_eq!(exprs[0].operator, "NotIn");
        assert_eq!(exprs[0].values, Some(vec!["3".to_string()]));
    }

    #[test]
    fn a_preferred_constraint_only_gives_preferred_terms() {
        let cs = [constraint(ZONE_KEY, 1, SpreadMode::Preferred)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            0,
            0,
            &cs,
            &placed("n1", Some("a")),
            None,
        )
        .unwrap();
        assert!(required_exprs(&a).is_empty());
        let node = a.node_affinity.unwrap();
        let prefs = node
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(prefs.len(), 2);
        assert_eq!(prefs[0].weight, WEIGHT_PLANNED_NODE);
        assert_eq!(
            prefs[0].preference.match_fields.as_ref().unwrap()[0].values,
            Some(vec!["n1".to_string()])
        );
        assert_eq!(prefs[1].weight, WEIGHT_PREFERRED_DOMAIN);
        let anti = a.pod_anti_affinity.unwrap();
        assert!(
            anti.required_during_scheduling_ignored_during_execution
                .is_none()
        );
        let preferred = anti
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred[0].weight, WEIGHT_PREFERRED_SPREAD);
        assert_eq!(preferred[0].pod_affinity_term.topology_key, ZONE_KEY);
    }

    #[test]
    fn a_preferred_constraint_planned_onto_nodes_without_the_key_prefers_no_domain() {
        let cs = [constraint(ZONE_KEY, 2, SpreadMode::Preferred)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            0,
            0,
            &cs,
            &placed("n1", None),
            None,
        )
        .unwrap();
        let prefs = a
            .node_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(prefs.len(), 1, "only the planned node");
    }

    #[test]
    fn operator_expressions_are_anded_into_every_user_term() {
        let user = Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![
                        NodeSelectorTerm {
                            match_expressions: Some(vec![requirement("disk", "ssd")]),
                            match_fields: None,
                        },
                        NodeSelectorTerm {
                            match_expressions: Some(vec![requirement("disk", "nvme")]),
                            match_fields: None,
                        },
                    ],
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Default::default()
        };
        let cs = [constraint(ZONE_KEY, 1, SpreadMode::Required)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            0,
            0,
            &cs,
            &placed("n1", Some("a")),
            Some(&user),
        )
        .unwrap();
        let zone = (
            ZONE_KEY.to_string(),
            "In".to_string(),
            vec!["a".to_string()],
        );
        assert_eq!(
            required_exprs(&a),
            vec![
                vec![
                    ("disk".into(), "In".into(), vec!["ssd".into()]),
                    zone.clone()
                ],
                vec![("disk".into(), "In".into(), vec!["nvme".into()]), zone],
            ]
        );
    }

    #[test]
    fn user_pod_affinity_and_preferred_terms_are_kept() {
        let user_term = WeightedPodAffinityTerm {
            weight: 7,
            pod_affinity_term: shard_term((api::SetKind::Cluster, "other"), 0, 0, "rack"),
        };
        let user = Affinity {
            pod_affinity: Some(Default::default()),
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![user_term.clone()]),
                required_during_scheduling_ignored_during_execution: None,
            }),
            node_affinity: None,
        };
        let cs = [constraint(ZONE_KEY, 1, SpreadMode::Preferred)];
        let a = affinity(
            (api::SetKind::Cluster, "c"),
            0,
            0,
            &cs,
            &placed("n1", Some("a")),
            Some(&user),
        )
        .unwrap();
        assert!(a.pod_affinity.is_some());
        let preferred = a
            .pod_anti_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred.len(), 2);
        assert_eq!(preferred[1], user_term);
    }

    #[test]
    fn an_unplaceable_member_gets_a_rule_no_node_meets() {
        let cs = [constraint(ZONE_KEY, 1, SpreadMode::Required)];
        let p = Unplaced {
            reason: "no zone left".into(),
        };
        let a = affinity((api::SetKind::Cluster, "c"), 0, 0, &cs, &p, None).unwrap();
        assert_eq!(
            required_exprs(&a),
            vec![vec![(
                UNPLACEABLE_KEY.to_string(),
                "Exists".to_string(),
                vec![]
            )]]
        );
        // The shard's anti-affinity still applies.
        assert!(a.pod_anti_affinity.is_some());
    }

    #[test]
    fn without_constraints_plan_or_user_rules_there_is_no_affinity() {
        assert_eq!(
            affinity((api::SetKind::Cluster, "c"), 0, 0, &[], &Unplanned, None),
            None
        );
    }
}
