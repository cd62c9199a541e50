//! Decide, TLS turned on for a live cluster. The members cannot change
//! wire one at a time: the cluster bus has one listener and speaks one wire
//! (`tls-cluster`), so a member on TLS and one on plaintext cannot gossip,
//! and a rolling change would split the bus. The switch therefore goes:
//!
//! 1. `switching` (the members' config file has no `tls-cluster yes`): the
//!    file keeps plaintext but names the certificate files, and the pod
//!    template gains the certificate volume, so the rolling update restarts
//!    every member (failover first) onto a pod that has them; clients,
//!    replication and the bus stay on plaintext meanwhile;
//! 2. once every member runs that pod, is Ready and answers ([`step`]),
//!    the operator sends every member, concurrently, one CONFIG SET of
//!    [`resources::config::tls_wire`]: Valkey closes the plaintext
//!    listener, opens TLS on the same port and re-opens the bus listener
//!    for TLS; the bus is split only for the milliseconds between members;
//! 3. then it drops the plaintext connections (clients, replication links,
//!    which reconnect over TLS and resume with a partial sync), and, once
//!    every member says `tls-cluster yes`, writes the TLS file: members
//!    restarted from then on start on TLS.
//!
//! The pod is the same before and after step 2 (its probe tries TLS, then
//! plaintext), so there is one rolling restart, not two.

use crate::facts::{Facts, desired_members};
use crate::pods::{PodFacts, needs_restart};
use crate::view::KubeView;
use api::ValidatedCluster;
use api::constants::member_name;
use k8s_openapi::api::core::v1::ConfigMap;
use resources::Desired;
use resources::config::{CONFIG_FILE, TLS_CLUSTER};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Whether a TLS cluster's members may still speak plaintext: the config
/// file the operator last wrote (the cluster's ConfigMap) does not say
/// `tls-cluster yes`. A new cluster (no file, no member StatefulSet yet)
/// starts on TLS. A cluster that has members but lost its file counts as
/// switching: it gets the plaintext-and-certificates file back, and the
/// switch, finding every member on TLS already, writes the TLS file at
/// once (members on TLS are reached with plaintext tried first); a TLS
/// file written then would start a restarted member on TLS beside members
/// still on plaintext, had the file been lost mid-switch.
pub fn switching(config_map: Option<&ConfigMap>, has_members: bool) -> bool {
    match config_map
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(CONFIG_FILE))
    {
        Some(text) => !text
            .lines()
            .any(|l| l.split_whitespace().eq([TLS_CLUSTER, "yes"])),
        None => has_members,
    }
}

/// One member of the spec, as the switch sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberWire {
    pub member: (u32, u32),
    /// Its pod runs the current template (the one with the certificates).
    pub rolled: bool,
    pub ready: bool,
    /// `tls-cluster` as the member said it: `None` when it did not answer.
    pub switched: Option<bool>,
    /// Its view names a client port for every node it knows. Right after
    /// the switch a member knows a peer's TLS port only from that peer's
    /// next ping, and lists it as port 0 until then (clients asking it
    /// would be sent to port 0).
    pub knows_ports: bool,
}

/// Every member of the spec as the switch sees it: its pod (against the
/// desired template) and what it said.
pub fn wires(f: &Facts<'_>, desired: &Desired) -> Vec<MemberWire> {
    desired_members(f.cluster)
        .map(|(s, m)| {
            let name = member_name(&f.cluster.name, s, m);
            let pod = f.kube.members.get(&(s, m)).map(PodFacts::of);
            let sts = desired
                .statefulsets
                .iter()
                .find(|x| x.metadata.name.as_deref() == Some(name.as_str()));
            MemberWire {
                member: (s, m),
                rolled: pod
                    .as_ref()
                    .is_some_and(|p| sts.is_none_or(|sts| !needs_restart(p, sts))),
                ready: pod.as_ref().is_some_and(|p| p.ready),
                switched: f
                    .report(s, m)
                    .map(|r| r.config.get(TLS_CLUSTER).is_some_and(|v| v == "yes")),
                knows_ports: f.report(s, m).is_some_and(|r| {
                    r.nodes
                        .nodes()
                        .iter()
                        .all(|n| n.address.ip.is_none() || n.address.port != 0)
                }),
            }
        })
        .collect()
}

/// What the switch does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Not yet, and why.
    Wait(String),
    /// Switch these members (every member not switched yet).
    Switch(Vec<(u32, u32)>),
    /// Every member is on TLS and knows its peers' TLS ports: write the
    /// TLS config file.
    Done,
}

/// The next step of the switch. `quiet`: nothing else (a failover, a
/// restart, a move) is under way in this reconcile.
pub fn step(members: &[MemberWire], quiet: bool) -> Step {
    if members.is_empty() {
        return Step::Wait("no member yet".into());
    }
    if members.iter().all(|m| m.switched == Some(true)) {
        return match members.iter().find(|m| !m.knows_ports) {
            Some(m) => Step::Wait(format!(
                "shard {} member {} has not learnt every peer's TLS port yet",
                m.member.0, m.member.1
            )),
            None => Step::Done,
        };
    }
    if let Some(m) = members.iter().find(|m| !m.rolled) {
        return Step::Wait(format!(
            "shard {} member {} restarts with the certificates first",
            m.member.0, m.member.1
        ));
    }
    if let Some(m) = members.iter().find(|m| m.switched.is_none()) {
        return Step::Wait(format!(
            "shard {} member {} does not answer",
            m.member.0, m.member.1
        ));
    }
    // Once one member is on TLS the rest follow at once (it cannot gossip
    // with them until they do); before that, every member must be Ready.
    let started = members.iter().any(|m| m.switched == Some(true));
    if !started {
        if let Some(m) = members.iter().find(|m| !m.ready) {
            return Step::Wait(format!(
                "shard {} member {} is not Ready",
                m.member.0, m.member.1
            ));
        }
        if !quiet {
            return Step::Wait("another change is under way".into());
        }
    }
    Step::Switch(
        members
            .iter()
            .filter(|m| m.switched != Some(true))
            .map(|m| m.member)
            .collect(),
    )
}

/// The IPs of every member pod (and new copy) that has one, and the
/// external address of every member (`spec.externalAccess`): the serving
/// certificate must name them, as clients verify the address they were
/// sent to (a new or changed external address issues it again).
pub fn member_ips(cluster: &ValidatedCluster, view: &KubeView) -> BTreeSet<IpAddr> {
    view.members
        .values()
        .chain(view.new_copies.values())
        .filter_map(|p| PodFacts::of(p).ip)
        .chain(
            crate::external::addresses(cluster, view)
                .values()
                .map(std::net::SocketAddr::ip),
        )
        .collect()
}

/// The TLS switch's next step, while TLS is being turned on for a live
/// cluster (`None` otherwise). `quiet`: nothing else happened this reconcile.
pub fn switch_step(
    cluster: &ValidatedCluster,
    f: &Facts<'_>,
    desired: &Desired,
    quiet: bool,
) -> Option<Step> {
    cluster.tls.as_ref().filter(|t| t.switching)?;
    Some(step(&wires(f, desired), quiet))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn file(text: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([(
                CONFIG_FILE.to_string(),
                text.to_string(),
            )])),
            ..Default::default()
        }
    }

    fn m(s: u32, rolled: bool, ready: bool, switched: Option<bool>) -> MemberWire {
        MemberWire {
            member: (s, 0),
            rolled,
            ready,
            switched,
            knows_ports: true,
        }
    }

    #[test]
    fn a_cluster_switches_while_its_file_is_not_on_tls() {
        assert!(!switching(None, false), "a new cluster starts on TLS");
        assert!(switching(None, true), "a cluster that lost its file");
        assert!(switching(
            Some(&file("port 6379\ncluster-enabled yes\n")),
            true
        ));
        assert!(!switching(
            Some(&file("port 0\ntls-port 6379\ntls-cluster yes\n")),
            true
        ));
        assert!(switching(Some(&file("tls-cluster no\n")), true));
    }

    #[test]
    fn members_switch_together_once_all_run_the_new_pod_and_are_ready() {
        let not_rolled = [
            m(0, true, true, Some(false)),
            m(1, false, true, Some(false)),
        ];
        assert!(matches!(step(&not_rolled, true), Step::Wait(w) if w.contains("shard 1")));
        let silent = [m(0, true, true, Some(false)), m(1, true, true, None)];
        assert!(matches!(step(&silent, true), Step::Wait(w) if w.contains("answer")));
        let unready = [
            m(0, true, false, Some(false)),
            m(1, true, true, Some(false)),
        ];
        assert!(matches!(step(&unready, true), Step::Wait(w) if w.contains("Ready")));
        let ready = [m(0, true, true, Some(false)), m(1, true, true, Some(false))];
        assert!(matches!(step(&ready, false), Step::Wait(w) if w.contains("under way")));
        assert_eq!(step(&ready, true), Step::Switch(vec![(0, 0), (1, 0)]));
    }

    #[test]
    fn once_one_member_is_on_tls_the_others_follow_at_once() {
        // A member switched, another restarted from the old file meanwhile
        // (not Ready yet): it is switched now, not after waiting.
        let half = [m(0, true, true, Some(true)), m(1, true, false, Some(false))];
        assert_eq!(step(&half, false), Step::Switch(vec![(1, 0)]));
        let mut all = [m(0, true, true, Some(true)), m(1, true, true, Some(true))];
        assert_eq!(step(&all, true), Step::Done);
        all[1].knows_ports = false;
        assert!(matches!(step(&all, true), Step::Wait(w) if w.contains("TLS port")));
        assert!(matches!(step(&[], true), Step::Wait(_)));
    }
}
