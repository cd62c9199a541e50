//! Observe, Valkey side: every member (and the new copy of each move in
//! flight) is asked CLUSTER NODES, INFO and its live config over one plain
//! connection (see [`crate::controller::valkey_io`]). A member whose pod has
//! no IP, or that cannot be asked (the password is missing), is observed as
//! unreachable; a leaving member whose pod is gone is still listed by its
//! recorded node id, so the planner can tell whether it owns slots.

use crate::context::Context;
use crate::controller::valkey_io::{self, Session};
use crate::events::reason;
use api::ValidatedCluster;
use api::v1alpha1::ValkeyClusterStatus;
use decide::facts::{desired_members, member_of};
use decide::pods::PodFacts;
use decide::view::KubeView;
use k8s_openapi::api::core::v1::Pod;
use resources::config;
use resources::tls::{CaPhase, CaSet};
use std::collections::BTreeSet;
use valkey::model::{MemberAddr, MemberIndex, MemberRef, ObservedCluster, ShardIndex};
use valkey::parse::NodeId;
use valkey_client::client::{Login, Target};

/// What the members said, and the connections to send commands over.
pub struct ValkeyObservation {
    pub observed: ObservedCluster,
    pub session: Session,
    /// How the members were connected to.
    pub opts: valkey_client::client::ConnectOptions,
}

fn pod_addr(pod: &Pod) -> Option<MemberAddr> {
    let ip = PodFacts::of(pod).ip?;
    MemberAddr::with_default_bus(ip, api::constants::VALKEY_PORT)
}

/// The keys the members are asked about with CONFIG GET.
fn config_keys(cluster: &ValidatedCluster) -> Vec<String> {
    let mut keys: Vec<String> = config::live_config(cluster).into_keys().collect();
    keys.push("availability-zone".into());
    // Asked with external access off too: turning it off resets them.
    keys.extend(
        decide::external::ANNOUNCE_KEYS
            .iter()
            .map(|k| (*k).to_string()),
    );
    keys.push(config::NODE_TIMEOUT.into());
    if cluster.tls.as_ref().is_some_and(|t| t.switching) {
        // Whether the member has been switched to TLS yet.
        keys.push(config::TLS_CLUSTER.into());
    }
    keys
}

/// Whom to ask: the members of the spec, every member with a pod or a
/// StatefulSet (leaving ones too), and the new copies of moves in flight.
fn targets(
    cluster: &ValidatedCluster,
    view: &KubeView,
    old_status: Option<&ValkeyClusterStatus>,
    enabled: bool,
    silent: &BTreeSet<MemberAddr>,
) -> Vec<Target> {
    let mut refs: BTreeSet<(u32, u32)> = desired_members(cluster).collect();
    refs.extend(view.members.keys().copied());
    refs.extend(view.statefulsets.values().filter_map(member_of));
    let mut targets: Vec<Target> = refs
        .iter()
        .map(|&(s, m)| {
            let recorded = old_status.and_then(|st| {
                st.members
                    .iter()
                    .find(|x| x.shard == s as i32 && x.member == m as i32)
            });
            let known_node_id = recorded
                .and_then(|x| x.node_id.as_deref())
                .and_then(|id| id.parse::<NodeId>().ok());
            let former_node_ids = recorded
                .into_iter()
                .flat_map(|x| &x.former_node_ids)
                .filter_map(|id| id.parse::<NodeId>().ok())
                .collect();
            // Without the password nobody can be asked.
            let addr = view
                .members
                .get(&(s, m))
                .and_then(pod_addr)
                .filter(|_| enabled);
            Target {
                member: MemberRef::new(s, m),
                silent: addr.is_some_and(|a| silent.contains(&a)),
                addr,
                known_node_id,
                former_node_ids,
            }
        })
        .collect();
    // The new copies of moves in flight, under their own index.
    targets.extend(view.new_copies.iter().map(|(&(s, m), pod)| Target {
        member: MemberRef {
            shard: ShardIndex(s),
            member: MemberIndex::NewCopyOf(m),
        },
        addr: pod_addr(pod).filter(|_| enabled),
        known_node_id: None,
        former_node_ids: Vec::new(),
        silent: false,
    }));
    targets
}

/// Asks every member of `cluster`.
pub async fn members(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
    old_status: Option<&ValkeyClusterStatus>,
    (auth, own_login, passwords): (&AuthState, Login, (Option<&str>, Option<&str>)),
    tls: &TlsState,
) -> ValkeyObservation {
    let enabled = !matches!(auth, AuthState::Missing(_)) && !matches!(tls, TlsState::Missing(_));
    let opts = valkey_io::connect_options(
        Some(own_login),
        passwords,
        (
            tls.ca_pem(),
            cluster.tls.as_ref().is_some_and(|t| t.switching),
        ),
        ctx.settings.timeouts,
    );
    let (mut observed, session) = valkey_io::observe(
        &targets(cluster, view, old_status, enabled, &ctx.pulse.silent()),
        &opts,
        &config_keys(cluster),
    )
    .await;
    // Members that announce an external address show it in CLUSTER NODES;
    // the rest of the reconcile knows them by pod address.
    decide::external::internal_view(&mut observed, &decide::external::addresses(cluster, view));
    ValkeyObservation {
        observed,
        session,
        opts,
    }
}

use decide::rotation::{MemberAuth, MemberAuths};

/// Asks every connected member how it authenticates, all at once; a
/// member that did not answer is absent.
pub async fn member_auth(session: &Session) -> MemberAuths {
    use valkey_client::client::Admin as _;
    let keys = [
        "requirepass".to_string(),
        "primaryuser".to_string(),
        "primaryauth".to_string(),
    ];
    let answers = futures::future::join_all(session.iter().map(|(m, admin)| {
        let keys = &keys;
        async move { (*m, admin.config_get(keys).await) }
    }))
    .await;
    answers
        .into_iter()
        .filter_map(|(m, answer)| {
            let c = answer.ok()?;
            let get = |k: &str| c.get(k).cloned().unwrap_or_default();
            Some((
                m,
                MemberAuth {
                    requirepass: get("requirepass"),
                    primaryuser: get("primaryuser"),
                    primaryauth: get("primaryauth"),
                },
            ))
        })
        .collect()
}

/// The members of the spec that started with another password than the
/// one they should run (`expected`: the Secret's, or "" with auth off;
/// `None` when it is not known), whatever their restart hash says: a pod
/// started after the Secret changed but before its StatefulSet did, or
/// changed back, carries a hash that does not tell. They must restart
/// (pure).
pub fn password_stale(expected: Option<&str>, auth: &MemberAuths) -> BTreeSet<(u32, u32)> {
    let Some(expected) = expected else {
        return BTreeSet::new();
    };
    auth.iter()
        .filter(|(_, a)| a.requirepass != expected)
        .filter_map(|(m, _)| match m.member {
            MemberIndex::Member(i) => Some((m.shard.0, i)),
            MemberIndex::NewCopyOf(_) => None,
        })
        .collect()
}

/// Whether the members need a password, and which.
pub enum AuthState {
    Off,
    Password(String),
    /// The user's Secret (or its key) is missing; the message says which.
    Missing(String),
}

impl AuthState {
    pub fn password(&self) -> Option<&str> {
        match self {
            AuthState::Password(p) => Some(p.as_str()),
            _ => None,
        }
    }

    /// What keeps the cluster from converging, as (reason, message).
    pub fn blocker(&self) -> Option<(String, String)> {
        match self {
            AuthState::Missing(m) => Some((reason::SECRET_MISSING.to_string(), m.clone())),
            _ => None,
        }
    }
}

/// Whether the members speak TLS, and the CA to trust when they do.
pub enum TlsState {
    Off,
    /// The CA certificates (PEM) the members' certificate chains to, and the
    /// operator's CA when it runs one.
    Ready(Vec<u8>, Option<CaSet>),
    /// The user's Secret (or one of its keys) is missing; the message says which.
    Missing(String),
}

impl TlsState {
    pub fn ca_pem(&self) -> Option<&[u8]> {
        match self {
            TlsState::Ready(ca, _) => Some(ca.as_slice()),
            _ => None,
        }
    }

    /// The operator's CA, when it runs one.
    pub fn operator_ca(&self) -> Option<&CaSet> {
        match self {
            TlsState::Ready(_, set) => set.as_ref(),
            _ => None,
        }
    }

    /// Whether a rotation of the operator's CA is in flight (the cluster is
    /// reconciled often meanwhile).
    pub fn rotating(&self) -> bool {
        self.operator_ca()
            .is_some_and(|set| set.phase() != CaPhase::Steady)
    }

    /// What keeps the cluster from converging, as (reason, message).
    pub fn blocker(&self) -> Option<(String, String)> {
        match self {
            TlsState::Missing(m) => Some((reason::TLS_SECRET_MISSING.to_string(), m.clone())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod auth_tests {
    use super::*;

    #[test]
    fn a_member_started_with_another_password_must_restart() {
        let auth = |p: &str| MemberAuth {
            requirepass: p.into(),
            ..MemberAuth::default()
        };
        let members = std::collections::BTreeMap::from([
            (MemberRef::new(0, 0), auth("new")),
            (MemberRef::new(0, 1), auth("old")),
            (MemberRef::new(1, 0), auth("")),
        ]);
        assert_eq!(
            password_stale(Some("new"), &members),
            BTreeSet::from([(0, 1), (1, 0)])
        );
        // Auth off: every member that started with a password.
        assert_eq!(
            password_stale(Some(""), &members),
            BTreeSet::from([(0, 0), (0, 1)])
        );
        assert!(password_stale(None, &members).is_empty());
        // Its Debug leaves the passwords out.
        let text = format!("{:?}", auth("s3cret"));
        assert!(!text.contains("s3cret"), "{text}");
    }
}
