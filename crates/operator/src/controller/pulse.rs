//! Between the resyncs of a steady cluster, a cheap look at its members:
//! every `--pulse-seconds` each member is asked `ROLE` (a few words, where
//! `INFO replication` is a page to parse) over a connection kept open for
//! it. A failover Valkey made on its own, a replica
//! whose link went down or came back, a member that stopped answering or
//! answers again: anything that differs from what the last reconcile saw
//! triggers a reconcile of that cluster at once, so status, conditions and
//! role labels tell the truth within seconds instead of at the next resync.
//! While nothing changes, it sends no API request at all.
//!
//! Only clusters whose last reconcile found them steady are looked at (a
//! converging one is reconciled every second anyway). The decision
//! ([`changed`]) is pure; the rest is thin I/O.

use api::v1alpha1::ValkeyCluster;
use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;
use valkey::model::{MemberAddr, MemberState, ObservedCluster};
use valkey::parse::{ReplicationInfo, Role, RoleReply};
use valkey_client::client::{Admin, ConnectOptions, ValkeyAdmin};

/// What a member said about its replication, reduced to what the status
/// shows: its role, whom it follows and whether its link is up; `None`
/// when it did not answer.
pub type Beat = Option<String>;

/// The beat of one member's `INFO replication`.
pub fn beat(info: &ReplicationInfo) -> String {
    match (info.role, &info.primary_link) {
        (Role::Primary, _) => "primary".to_string(),
        (Role::Replica, Some(link)) => format!(
            "replica of {}:{} link {}",
            link.host,
            link.port,
            if link.link_up { "up" } else { "down" }
        ),
        (Role::Replica, None) => "replica".to_string(),
    }
}

/// The beat of one member's `ROLE`: the same text as [`beat`] of its `INFO
/// replication` (a replica's link is up exactly when ROLE says `connected`).
pub fn beat_of_role(role: &RoleReply) -> String {
    match role {
        RoleReply::Primary { .. } => "primary".to_string(),
        RoleReply::Replica {
            primary_ip,
            primary_port,
            state,
            ..
        } => format!(
            "replica of {primary_ip}:{primary_port} link {}",
            if state == "connected" { "up" } else { "down" }
        ),
    }
}

/// Whether what the members say now differs from what the last reconcile
/// saw (a member missing from `now` was not asked: no change).
pub fn changed(seen: &BTreeMap<MemberAddr, Beat>, now: &BTreeMap<MemberAddr, Beat>) -> bool {
    now.iter()
        .any(|(addr, b)| seen.get(addr).is_some_and(|s| s != b))
}

/// One steady cluster as its last reconcile left it.
struct Watched {
    seen: BTreeMap<MemberAddr, Beat>,
    opts: ConnectOptions,
}

/// Where to send a reconcile of a cluster.
type Trigger = UnboundedSender<ObjectRef<ValkeyCluster>>;

/// How long a member has to answer `ROLE` (a few bytes; a member that
/// takes longer is as good as silent for the status).
pub const DEADLINE: Duration = Duration::from_secs(1);

/// How long a member that did not answer counts as silent for the
/// reconciles that follow (see [`Pulse::silent`]).
const SILENT_FOR: Duration = Duration::from_secs(10);

/// The steady clusters to look at, and where to send a reconcile.
pub struct Pulse {
    watched: Mutex<HashMap<ObjectRef<ValkeyCluster>, Watched>>,
    /// The trigger of each controller scope (`None`: every namespace).
    triggers: Mutex<Vec<(Option<String>, Trigger)>>,
    /// Members that did not answer their last look, and when.
    silent: Mutex<HashMap<MemberAddr, Instant>>,
}

impl Pulse {
    pub fn new() -> Pulse {
        Pulse {
            watched: Mutex::new(HashMap::new()),
            triggers: Mutex::new(Vec::new()),
            silent: Mutex::new(HashMap::new()),
        }
    }

    /// The members that did not answer the pulse in the last [`SILENT_FOR`]:
    /// the reconcile gives them a short deadline
    /// ([`valkey_client::client::SILENT_DEADLINE`]) instead of the full timeouts.
    pub fn silent(&self) -> BTreeSet<MemberAddr> {
        let now = Instant::now();
        self.silent
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|(_, at)| now.duration_since(**at) < SILENT_FOR)
                    .map(|(a, _)| *a)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets members silent longer than [`SILENT_FOR`] ago (a deleted
    /// cluster's members are never asked again, so never noted as answering).
    fn forget_old_silence(&self, now: Instant) {
        if let Ok(mut s) = self.silent.lock() {
            s.retain(|_, at| now.duration_since(*at) < SILENT_FOR);
        }
    }

    fn note(&self, addr: MemberAddr, answered: bool) {
        if let Ok(mut s) = self.silent.lock() {
            if answered {
                s.remove(&addr);
            } else {
                s.insert(addr, Instant::now());
            }
        }
    }

    /// Registers the trigger of the controller over `scope`.
    pub fn add_trigger(&self, scope: Option<String>, tx: Trigger) {
        if let Ok(mut t) = self.triggers.lock() {
            t.push((scope, tx));
        }
    }

    /// After a reconcile: a steady cluster is looked at from now on with
    /// what the members said; a converging one is not.
    pub fn record(
        &self,
        cluster: ObjectRef<ValkeyCluster>,
        steady: bool,
        observed: &ObservedCluster,
        opts: ConnectOptions,
    ) {
        let Ok(mut w) = self.watched.lock() else {
            return;
        };
        if !steady {
            w.remove(&cluster);
            return;
        }
        let seen = observed
            .members
            .iter()
            .filter_map(|m| {
                let addr = m.addr?;
                let b = match &m.state {
                    MemberState::Reachable(report) => Some(beat(&report.replication)),
                    MemberState::Unreachable { .. } => None,
                };
                Some((addr, b))
            })
            .collect();
        w.insert(cluster, Watched { seen, opts });
    }

    /// A deleted cluster is no longer looked at.
    pub fn forget(&self, cluster: &ObjectRef<ValkeyCluster>) {
        if let Ok(mut w) = self.watched.lock() {
            w.remove(cluster);
        }
    }

    fn trigger(&self, cluster: ObjectRef<ValkeyCluster>) {
        let Ok(t) = self.triggers.lock() else { return };
        for (scope, tx) in t.iter() {
            if scope.is_none() || scope.as_deref() == cluster.namespace.as_deref() {
                let _ = tx.send(cluster.clone());
            }
        }
    }

    /// Looks at every steady cluster every `every`, forever (the caller
    /// drops the task when it stops leading). Every cluster's members are
    /// asked at once, so a member that does not answer holds back nobody
    /// else's look beyond [`DEADLINE`].
    pub async fn run(&self, every: Duration) {
        let mut conns: HashMap<MemberAddr, ValkeyAdmin> = HashMap::new();
        loop {
            tokio::time::sleep(every).await;
            let watched: Vec<(
                ObjectRef<ValkeyCluster>,
                BTreeMap<MemberAddr, Beat>,
                ConnectOptions,
            )> = match self.watched.lock() {
                Ok(w) => w
                    .iter()
                    .map(|(k, v)| (k.clone(), v.seen.clone(), v.opts.clone()))
                    .collect(),
                Err(_) => return,
            };
            // Connections of members no longer looked at are closed.
            conns.retain(|addr, _| watched.iter().any(|(_, seen, _)| seen.contains_key(addr)));
            self.forget_old_silence(Instant::now());
            let asks = watched.iter().flat_map(|(_, seen, opts)| {
                seen.keys()
                    .map(|addr| (*addr, conns.remove(addr), opts))
                    .collect::<Vec<_>>()
            });
            let answers: HashMap<MemberAddr, Beat> = futures::future::join_all(
                asks.map(|(addr, kept, opts)| async move { (addr, ask(kept, addr, opts).await) }),
            )
            .await
            .into_iter()
            .map(|(addr, (b, kept))| {
                if let Some(admin) = kept {
                    conns.insert(addr, admin);
                }
                self.note(addr, b.is_some());
                (addr, b)
            })
            .collect();
            for (cluster, seen, _) in watched {
                let now: BTreeMap<MemberAddr, Beat> = seen
                    .keys()
                    .filter_map(|a| answers.get(a).map(|b| (*a, b.clone())))
                    .collect();
                if changed(&seen, &now) {
                    tracing::debug!(cluster = %cluster, "a member changed between reconciles");
                    // Not looked at again until the reconcile records it.
                    self.forget(&cluster);
                    self.trigger(cluster);
                }
            }
        }
    }
}

impl Default for Pulse {
    fn default() -> Self {
        Pulse::new()
    }
}

/// One member's beat, over its kept connection (opened when missing), and
/// the connection to keep (none after a failure).
async fn ask(
    kept: Option<ValkeyAdmin>,
    addr: MemberAddr,
    opts: &ConnectOptions,
) -> (Beat, Option<ValkeyAdmin>) {
    let look = async {
        let admin = match kept {
            Some(a) => a,
            None => ValkeyAdmin::connect_member(addr, opts).await.ok()?,
        };
        let role = admin.role().await.ok()?;
        Some((beat_of_role(&role), admin))
    };
    match tokio::time::timeout(DEADLINE, look).await {
        Ok(Some((beat, admin))) => (Some(beat), Some(admin)),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use valkey::parse::PrimaryLink;

    fn replica(host: &str, up: bool) -> ReplicationInfo {
        ReplicationInfo {
            role: Role::Replica,
            repl_offset: 10,
            connected_replicas: 0,
            replicas: vec![],
            primary_link: Some(PrimaryLink {
                host: host.into(),
                port: 6379,
                link_up: up,
                sync_in_progress: false,
                repl_offset: 10,
                last_io_seconds_ago: Some(0),
            }),
        }
    }

    fn addr(last: u8) -> MemberAddr {
        MemberAddr::with_default_bus(format!("10.0.0.{last}").parse().unwrap(), 6379).unwrap()
    }

    #[test]
    fn a_beat_says_role_primary_and_link() {
        assert_eq!(
            beat(&replica("10.0.0.1", true)),
            "replica of 10.0.0.1:6379 link up"
        );
        assert_eq!(
            beat(&replica("10.0.0.1", false)),
            "replica of 10.0.0.1:6379 link down"
        );
        let mut p = replica("x", true);
        p.role = Role::Primary;
        p.primary_link = None;
        assert_eq!(beat(&p), "primary");
    }

    #[test]
    fn role_and_info_replication_give_the_same_beat() {
        let role = |state: &str| RoleReply::Replica {
            primary_ip: "10.0.0.1".into(),
            primary_port: 6379,
            state: state.into(),
            offset: 10,
        };
        assert_eq!(
            beat_of_role(&role("connected")),
            beat(&replica("10.0.0.1", true))
        );
        for state in ["connect", "connecting", "sync", "handshake"] {
            assert_eq!(
                beat_of_role(&role(state)),
                beat(&replica("10.0.0.1", false))
            );
        }
        let primary = RoleReply::Primary {
            offset: 5,
            replicas: vec![("10.0.0.2".into(), 6379, 5)],
        };
        let mut p = replica("x", true);
        p.role = Role::Primary;
        p.primary_link = None;
        assert_eq!(beat_of_role(&primary), beat(&p));
    }

    #[test]
    fn silence_is_remembered_for_a_while_then_forgotten() {
        let pulse = Pulse::new();
        pulse.note(addr(1), false);
        pulse.note(addr(2), false);
        pulse.note(addr(2), true);
        assert_eq!(pulse.silent(), [addr(1)].into());
        pulse.forget_old_silence(Instant::now());
        assert_eq!(pulse.silent(), [addr(1)].into());
        pulse.forget_old_silence(Instant::now() + SILENT_FOR);
        assert!(pulse.silent.lock().unwrap().is_empty());
    }

    #[test]
    fn a_failover_a_lost_link_or_a_silent_member_is_a_change() {
        let seen: BTreeMap<MemberAddr, Beat> = [
            (addr(1), Some("primary".to_string())),
            (addr(2), Some(beat(&replica("10.0.0.1", true)))),
        ]
        .into();
        assert!(!changed(&seen, &seen.clone()));
        // Valkey promoted the replica on its own.
        let mut failover = seen.clone();
        failover.insert(addr(1), Some(beat(&replica("10.0.0.2", true))));
        failover.insert(addr(2), Some("primary".to_string()));
        assert!(changed(&seen, &failover));
        // The replica's link went down.
        let mut down = seen.clone();
        down.insert(addr(2), Some(beat(&replica("10.0.0.1", false))));
        assert!(changed(&seen, &down));
        // The primary stopped answering.
        let mut silent = seen.clone();
        silent.insert(addr(1), None);
        assert!(changed(&seen, &silent));
        // A member the last reconcile could not reach answers again.
        let was_silent: BTreeMap<MemberAddr, Beat> = [(addr(1), None)].into();
        let back: BTreeMap<MemberAddr, Beat> = [(addr(1), Some("primary".to_string()))].into();
        assert!(changed(&was_silent, &back));
        // A member not asked is no change.
        assert!(!changed(&seen, &BTreeMap::new()));
    }
}
