//! Which nodes may hold a member, and how many: taints and tolerations as
//! Kubernetes matches them, cordons, readiness, the nodeSelector and room.

use crate::model::{
    NodeInfo, Problem, Resources, Taint, TaintEffect, Toleration, TolerationOperator,
};
use std::collections::BTreeMap;

/// Whether `toleration` tolerates `taint`, with the kube-scheduler's rules: a
/// toleration without effect matches every effect; an empty or absent key
/// matches every key; `Exists` ignores the value, `Equal` compares it (an
/// absent value is the empty string).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    if let Some(key) = toleration.key.as_deref()
        && !key.is_empty()
        && key != taint.key
    {
        return false;
    }
    match toleration.operator {
        TolerationOperator::Exists => true,
        TolerationOperator::Equal => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// The first taint of `node` with one of `effects` that no toleration tolerates.
fn untolerated<'a>(
    node: &'a NodeInfo,
    tolerations: &[Toleration],
    effects: &[TaintEffect],
) -> Option<&'a Taint> {
    node.taints.iter().find(|taint| {
        effects.contains(&taint.effect) && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

/// How many members fit on `node` next to the pods that are not members of this
/// cluster: for every requested resource, free / request (rounded down), and at
/// most the free pod slots. A resource that is not requested (or requested as 0)
/// does not limit. At most `limit`.
pub fn room(node: &NodeInfo, request: &Resources, limit: u64) -> u64 {
    let free = |alloc: u64, used: u64| alloc.saturating_sub(used);
    let mut room = free(node.allocatable.pods, node.used_by_others.pods).min(limit);
    if let Some(cpu) = request.cpu_millis.filter(|&c| c > 0) {
        room = room.min(free(node.allocatable.cpu_millis, node.used_by_others.cpu_millis) / cpu);
    }
    if let Some(mem) = request.memory_bytes.filter(|&m| m > 0) {
        room = room.min(
            free(
                node.allocatable.memory_bytes,
                node.used_by_others.memory_bytes,
            ) / mem,
        );
    }
    room
}

/// Why a node cannot take a new member (the first reason that applies).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Exclusion {
    NotReady,
    Cordoned,
    /// `key=value:Effect` of the first untolerated taint.
    Taint(String),
    /// The first nodeSelector key the node does not match.
    NodeSelector(String),
    /// The first Required topologyKey the node lacks.
    MissingKey(String),
    /// The other pods leave no room.
    NoRoom,
}

impl Exclusion {
    /// A short phrase for counting nodes: "NotReady", "cordoned", ...
    pub fn describe(&self) -> String {
        match self {
            Exclusion::NotReady => "NotReady".into(),
            Exclusion::Cordoned => "cordoned".into(),
            Exclusion::Taint(t) => format!("with untolerated taint {t}"),
            Exclusion::NodeSelector(k) => format!("not matching nodeSelector {k}"),
            Exclusion::MissingKey(k) => format!("without label {k}"),
            Exclusion::NoRoom => "without room".into(),
        }
    }
}

fn taint_text(t: &Taint) -> String {
    let effect = match t.effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    };
    match &t.value {
        Some(v) if !v.is_empty() => format!("{}={}:{effect}", t.key, v),
        _ => format!("{}:{effect}", t.key),
    }
}

fn selector_mismatch<'a>(
    node: &NodeInfo,
    selector: &'a BTreeMap<String, String>,
) -> Option<&'a str> {
    selector
        .iter()
        .find(|(k, v)| node.labels.get(*k) != Some(*v))
        .map(|(k, _)| k.as_str())
}

/// What a node allows this cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assessment {
    /// Members (new or staying) that fit.
    pub room: u64,
    /// A new member may be scheduled here (implies `stay`).
    pub new: bool,
    /// A running member may stay here (room permitting).
    pub stay: bool,
    /// Why no new member may come, when `new` is false.
    pub exclusion: Option<Exclusion>,
}

/// Assesses `node` for `problem`, whose Required constraints have the resolved
/// keys `required_keys`.
pub(crate) fn assess(
    node: &NodeInfo,
    problem: &Problem,
    required_keys: &[String],
    limit: u64,
) -> Assessment {
    let room = room(node, &problem.request, limit);
    let selector = selector_mismatch(node, &problem.node_selector);
    let missing = required_keys.iter().find(|k| !node.labels.contains_key(*k));
    let evicting = untolerated(node, &problem.tolerations, &[TaintEffect::NoExecute]);
    let stay = node.ready && evicting.is_none() && selector.is_none() && missing.is_none();
    let blocking = untolerated(
        node,
        &problem.tolerations,
        &[TaintEffect::NoSchedule, TaintEffect::NoExecute],
    );
    let exclusion = if !node.ready {
        Some(Exclusion::NotReady)
    } else if node.unschedulable {
        Some(Exclusion::Cordoned)
    } else if let Some(t) = blocking {
        Some(Exclusion::Taint(taint_text(t)))
    } else if let Some(k) = selector {
        Some(Exclusion::NodeSelector(k.to_string()))
    } else if let Some(k) = missing {
        Some(Exclusion::MissingKey(k.clone()))
    } else if room == 0 {
        Some(Exclusion::NoRoom)
    } else {
        None
    };
    Assessment {
        room,
        new: exclusion.is_none(),
        stay,
        exclusion,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Capacity;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
        }
    }

    fn tol(
        key: Option<&str>,
        operator: TolerationOperator,
        value: Option<&str>,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator,
            value: value.map(Into::into),
            effect,
        }
    }

    #[test]
    fn exists_with_empty_key_tolerates_every_taint() {
        let t = tol(None, TolerationOperator::Exists, None, None);
        assert!(tolerates(
            &t,
            &taint("a", Some("b"), TaintEffect::NoExecute)
        ));
        assert!(tolerates(&t, &taint("x", None, TaintEffect::NoSchedule)));
        let t = tol(
            Some(""),
            TolerationOperator::Exists,
            None,
            Some(TaintEffect::NoSchedule),
        );
        assert!(tolerates(&t, &taint("x", None, TaintEffect::NoSchedule)));
        assert!(!tolerates(&t, &taint("x", None, TaintEffect::NoExecute)));
    }

    #[test]
    fn equal_compares_the_value_and_exists_ignores_it() {
        let eq = tol(
            Some("dedicated"),
            TolerationOperator::Equal,
            Some("db"),
            None,
        );
        assert!(tolerates(
            &eq,
            &taint("dedicated", Some("db"), TaintEffect::NoSchedule)
        ));
        assert!(!tolerates(
            &eq,
            &taint("dedicated", Some("web"), TaintEffect::NoSchedule)
        ));
        assert!(!tolerates(
            &eq,
            &taint("other", Some("db"), TaintEffect::NoSchedule)
        ));
        let ex = tol(Some("dedicated"), TolerationOperator::Exists, None, None);
        assert!(tolerates(
            &ex,
            &taint("dedicated", Some("web"), TaintEffect::NoExecute)
        ));
        let empty = tol(Some("k"), TolerationOperator::Equal, None, None);
        assert!(tolerates(
            &empty,
            &taint("k", None, TaintEffect::NoSchedule)
        ));
        assert!(tolerates(
            &empty,
            &taint("k", Some(""), TaintEffect::NoSchedule)
        ));
    }

    #[test]
    fn a_toleration_with_an_effect_matches_only_that_effect() {
        let t = tol(
            Some("k"),
            TolerationOperator::Exists,
            None,
            Some(TaintEffect::NoSchedule),
        );
        assert!(tolerates(&t, &taint("k", None, TaintEffect::NoSchedule)));
        assert!(!tolerates(&t, &taint("k", None, TaintEffect::NoExecute)));
    }

    fn node(alloc: Capacity, used: Capacity) -> NodeInfo {
        NodeInfo {
            name: "n".into(),
            labels: BTreeMap::new(),
            ready: true,
            unschedulable: false,
            taints: vec![],
            allocatable: alloc,
            used_by_others: used,
        }
    }

    #[test]
    fn room_is_the_tightest_requested_resource_and_unrequested_ones_do_not_limit() {
        let n = node(
            Capacity {
                cpu_millis: 4000,
                memory_bytes: 10 << 30,
                pods: 110,
            },
            Capacity {
                cpu_millis: 1500,
                memory_bytes: 1 << 30,
                pods: 10,
            },
        );
        let cpu_only = Resources {
            cpu_millis: Some(1000),
            memory_bytes: None,
        };
        assert_eq!(room(&n, &cpu_only, 1000), 2);
        let mem_only = Resources {
            cpu_millis: None,
            memory_bytes: Some(4 << 30),
        };
        assert_eq!(room(&n, &mem_only, 1000), 2);
        let nothing = Resources::default();
        assert_eq!(room(&n, &nothing, 1000), 100);
        assert_eq!(room(&n, &nothing, 7), 7);
        let zero = Resources {
            cpu_millis: Some(0),
            memory_bytes: None,
        };
        assert_eq!(room(&n, &zero, 1000), 100);
    }

    #[test]
    fn overcommitted_nodes_have_no_room() {
        let n = node(
            Capacity {
                cpu_millis: 1000,
                memory_bytes: 0,
                pods: 5,
            },
            Capacity {
                cpu_millis: 2000,
                memory_bytes: 0,
                pods: 9,
            },
        );
        assert_eq!(
            room(
                &n,
                &Resources {
                    cpu_millis: Some(100),
                    memory_bytes: None
                },
                10
            ),
            0
        );
    }
}
