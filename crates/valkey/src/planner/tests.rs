// Over 600 lines: tests, one scenario per function, read top to bottom.
//! Planner tests over a small simulated Valkey cluster.
//!
//! The simulator keeps the truth (who serves which slot, who follows whom, who holds
//! which data) and renders each node's CLUSTER NODES / INFO from it, with a few of
//! Valkey's habits: MEET completes one tick later, gossip spreads membership within
//! a tick, a forgotten id is banned for a few ticks and comes back if any node still
//! knows it, dead nodes are marked failed after a tick, a dead primary's in-sync
//! replica is promoted after two, and a returning old primary first shows a stale view
//! of itself and then turns into a replica. Every action is checked against the rules
//! Valkey enforces and the ones the planner promises (never ADDSLOTS a served slot,
//! never fail over to a lagging replica, never merge two clusters with slots...): a
//! broken rule panics the test.

use super::*;
use crate::model::{DesiredMember, DesiredShard, MemberState, NodeReport, ObservedMember};
use crate::parse::{
    ClusterNode, ClusterNodes, LinkState, MigrationOperation, MigrationState, NodeAddress,
    NodeFlags, PrimaryLink, ReplicationInfo, SlotMigration,
};
use crate::slots::{Slot, SlotRange};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

const BAN_TICKS: u32 = 3;

#[derive(Debug, Clone)]
struct SimNode {
    member: MemberRef,
    addr: MemberAddr,
    id: NodeId,
    alive: bool,
    dead_ticks: u32,
    slots: SlotSet,
    primary: Option<NodeId>,
    /// Other nodes it knows, at the address it knows them by.
    knows: BTreeMap<NodeId, MemberAddr>,
    banned: BTreeMap<NodeId, u32>,
    /// Slots whose data this node holds.
    holds: SlotSet,
    /// Extra keys outside its slots (a stale primary).
    stray_keys: u64,
    offset: i64,
    lag: i64,
    link_up: bool,
    /// Ticks a fresh replica still needs to finish its full sync.
    syncing: u32,
    pending_meets: Vec<MemberAddr>,
    /// A returning old primary's stale belief about its own slots, for one tick.
    stale_self: Option<SlotSet>,
    /// Who took over our slots while we were down.
    demoted_to: Option<NodeId>,
    config: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct Job {
    source: NodeId,
    target: NodeId,
    slots: SlotSet,
    ticks_left: u32,
}

#[derive(Debug, Clone, Default)]
struct Sim {
    nodes: Vec<SimNode>,
    current: BTreeMap<MemberRef, usize>,
    /// Ids the "operator" recorded in status.
    recorded: BTreeMap<MemberRef, NodeId>,
    /// Ids members had before the recorded one (status `formerNodeIds`).
    former: BTreeMap<MemberRef, Vec<NodeId>>,
    /// Slots that hold written keys.
    written: SlotSet,
    jobs: Vec<Job>,
    next_id: u64,
    next_ip: u8,
    track_ids: bool,
    /// Data may be lost in this scenario (a primary without replicas lost its disk).
    loss_allowed: bool,
    /// A restore: clusters whose slots are disjoint may meet.
    restoring: bool,
    log: Vec<String>,
}

fn id(n: u64) -> NodeId {
    format!("{n:040x}").parse().unwrap()
}

impl Sim {
    fn new() -> Sim {
        Sim {
            next_id: 1,
            next_ip: 1,
            track_ids: true,
            ..Sim::default()
        }
    }

    fn fresh_id(&mut self) -> NodeId {
        self.next_id += 1;
        id(self.next_id)
    }

    fn fresh_addr(&mut self) -> MemberAddr {
        self.next_ip += 1;
        MemberAddr {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, self.next_ip)),
            port: 6379,
            bus_port: 16379,
        }
    }

    /// Starts a fresh member (new pod, empty volume).
    fn add(&mut self, member: MemberRef) {
        let id = self.fresh_id();
        let addr = self.fresh_addr();
        self.nodes.push(SimNode {
            member,
            addr,
            id,
            alive: true,
            dead_ticks: 0,
            slots: SlotSet::new(),
            primary: None,
            knows: BTreeMap::new(),
            banned: BTreeMap::new(),
            holds: SlotSet::new(),
            stray_keys: 0,
            offset: 0,
            lag: 0,
            link_up: false,
            syncing: 0,
            pending_meets: Vec::new(),
            stale_self: None,
            demoted_to: None,
            config: BTreeMap::new(),
        });
        self.current.insert(member, self.nodes.len() - 1);
    }

    fn cluster(shards: u32, replicas: u32) -> Sim {
        let mut sim = Sim::new();
        for s in 0..shards {
            for m in 0..=replicas {
                sim.add(MemberRef::new(s, m));
            }
        }
        sim
    }

    fn idx(&self, member: MemberRef) -> usize {
        self.current[&member]
    }

    fn node(&self, member: MemberRef) -> &SimNode {
        &self.nodes[self.idx(member)]
    }

    fn by_id(&self, id: &NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| &n.id == id)
    }

    fn by_addr(&self, addr: &MemberAddr) -> Option<usize> {
        // The newest incarnation at that address.
        self.nodes.iter().rposition(|n| &n.addr == addr && n.alive)
    }

    fn kill(&mut self, member: MemberRef) {
        let i = self.idx(member);
        self.nodes[i].alive = false;
        self.nodes[i].dead_ticks = 0;
        self.jobs
            .retain(|j| j.source != self.nodes[i].id && j.target != self.nodes[i].id);
    }

    /// The member's process comes back with its nodes.conf and data.
    fn restart(&mut self, member: MemberRef) {
        let i = self.idx(member);
        let n = &mut self.nodes[i];
        n.alive = true;
        if let Some(new_primary) = n.demoted_to.take() {
            // It still believes it serves its old slots, for one tick.
            n.stale_self = Some(n.holds.clone());
            n.primary = Some(new_primary);
            n.link_up = false;
            n.syncing = 1;
        }
    }

    /// The member comes back as a new pod with a new IP and an empty volume.
    fn recreate(&mut self, member: MemberRef) {
        self.kill(member);
        self.add(member);
    }

    /// The member keeps its volume (nodes.conf) but gets a new IP.
    fn move_ip(&mut self, member: MemberRef) {
        let addr = self.fresh_addr();
        let i = self.idx(member);
        self.nodes[i].addr = addr;
    }

    /// The operator deletes a leaving member's pod.
    fn delete(&mut self, member: MemberRef) {
        self.kill(member);
        self.current.remove(&member);
        self.recorded.remove(&member);
    }

    fn write_everything(&mut self) {
        self.written = SlotSet::full();
        for n in self.nodes.iter_mut().filter(|n| n.alive) {
            n.offset += 1000;
        }
        // Replicas follow at once in this model.
    }

    // ---- rendering what members say ----

    fn line(&self, viewer: usize, j: usize) -> ClusterNode {
        let n = &self.nodes[j];
        let me = viewer == j;
        let addr = if me {
            n.addr
        } else {
            self.nodes[viewer]
                .knows
                .get(&n.id)
                .copied()
                .unwrap_or(n.addr)
        };
        let (mut slots, mut primary) = (n.slots.clone(), n.primary.clone());
        if let Some(stale) = &self.nodes[viewer].stale_self {
            if me {
                slots = stale.clone();
                primary = None;
            } else if !slots.intersection(stale).is_empty() {
                // The stale node still thinks it serves these.
                slots = slots.difference(stale);
            }
        }
        let flags = NodeFlags {
            myself: me,
            primary: primary.is_none(),
            replica: primary.is_some(),
            pfail: !n.alive && n.dead_ticks == 0,
            fail: !n.alive && n.dead_ticks > 0,
            ..NodeFlags::default()
        };
        ClusterNode {
            id: n.id.clone(),
            address: NodeAddress {
                ip: Some(addr.ip),
                port: addr.port,
                bus_port: addr.bus_port,
                hostname: None,
                aux: BTreeMap::new(),
            },
            flags,
            primary_id: primary,
            ping_sent_ms: 0,
            pong_received_ms: 0,
            config_epoch: 0,
            link: if n.alive {
                LinkState::Connected
            } else {
                LinkState::Disconnected
            },
            slots,
            markers: Vec::new(),
        }
    }

    fn view(&self, i: usize) -> ClusterNodes {
        let me = &self.nodes[i];
        let mut lines = vec![self.line(i, i)];
        for k in me.knows.keys() {
            if let Some(j) = self.by_id(k) {
                lines.push(self.line(i, j));
            }
        }
        for (n, addr) in me.pending_meets.iter().enumerate() {
            lines.push(ClusterNode {
                id: id(0xffff_0000 + n as u64),
                address: NodeAddress {
                    ip: Some(addr.ip),
                    port: addr.port,
                    bus_port: addr.bus_port,
                    hostname: None,
                    aux: BTreeMap::new(),
                },
                flags: NodeFlags {
                    handshake: true,
                    ..NodeFlags::default()
                },
                primary_id: None,
                ping_sent_ms: 0,
                pong_received_ms: 0,
                config_epoch: 0,
                link: LinkState::Disconnected,
                slots: SlotSet::new(),
                markers: Vec::new(),
            });
        }
        ClusterNodes::from_nodes(lines).unwrap()
    }

    fn replication(&self, i: usize) -> ReplicationInfo {
        let n = &self.nodes[i];
        match &n.primary {
            None => ReplicationInfo {
                role: Role::Primary,
                repl_offset: n.offset,
                connected_replicas: 0,
                replicas: Vec::new(),
                primary_link: None,
            },
            Some(p) => {
                let primary = self.by_id(p).map(|j| &self.nodes[j]);
                let (host, port, poff) = primary
                    .map(|p| (p.addr.ip.to_string(), p.addr.port, p.offset))
                    .unwrap_or_default();
                ReplicationInfo {
                    role: Role::Replica,
                    repl_offset: poff - n.lag,
                    connected_replicas: 0,
                    replicas: Vec::new(),
                    primary_link: Some(PrimaryLink {
                        host,
                        port,
                        link_up: n.link_up && primary.is_some_and(|p| p.alive),
                        sync_in_progress: n.syncing > 0,
                        repl_offset: poff - n.lag,
                        last_io_seconds_ago: Some(0),
                    }),
                }
            }
        }
    }

    fn keys(&self, i: usize) -> u64 {
        let n = &self.nodes[i];
        u64::from(n.holds.intersection(&self.written).len()) + n.stray_keys
    }

    /// Valkey's view of cluster_state: every slot served by a live primary, as far
    /// as this node knows.
    fn cluster_state_ok(&self, i: usize) -> bool {
        let view = self.view(i);
        view.nodes()
            .iter()
            .filter(|n| !n.is_failing())
            .fold(SlotSet::new(), |acc, n| acc.union(&n.slots))
            .is_full()
    }

    fn observe(&mut self) -> ObservedCluster {
        let mut members = Vec::new();
        for (r, &i) in &self.current {
            let n = &self.nodes[i];
            let state = if n.alive {
                let report = NodeReport {
                    nodes: self.view(i),
                    replication: self.replication(i),
                    slot_migrations: self
                        .jobs
                        .iter()
                        .filter(|j| j.source == n.id || j.target == n.id)
                        .map(|j| SlotMigration {
                            name: "job".into(),
                            operation: if j.source == n.id {
                                MigrationOperation::Export
                            } else {
                                MigrationOperation::Import
                            },
                            slots: j.slots.clone(),
                            source: Some(j.source.clone()),
                            target: Some(j.target.clone()),
                            state: MigrationState::Running("snapshotting".into()),
                            message: String::new(),
                            create_time: None,
                            remaining_repl_size: None,
                        })
                        .collect(),
                    keys: self.keys(i),
                    config: n.config.clone(),
                    cluster_state_ok: self.cluster_state_ok(i),
                    version: None,
                    modules: Vec::new(),
                };
                MemberState::Reachable(Box::new(report))
            } else {
                MemberState::Unreachable {
                    reason: "connection refused".into(),
                }
            };
            members.push(ObservedMember {
                member: *r,
                addr: Some(n.addr),
                known_node_id: if self.track_ids {
                    self.recorded.get(r).cloned()
                } else {
                    None
                },
                former_node_ids: if self.track_ids {
                    self.former.get(r).cloned().unwrap_or_default()
                } else {
                    Vec::new()
                },
                state,
            });
        }
        // The operator records what reachable members report.
        for (r, &i) in &self.current {
            if self.nodes[i].alive
                && let Some(old) = self.recorded.insert(*r, self.nodes[i].id.clone())
                && old != self.nodes[i].id
            {
                self.former.entry(*r).or_default().push(old);
            }
        }
        ObservedCluster { members }
    }

    // ---- applying actions, with Valkey's rules and the planner's promises ----

    #[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
    fn apply(&mut self, action: &Action, opts: &PlannerOptions) {
        self.log.push(action.to_string());
        let on = self.idx(action.on());
        assert!(self.nodes[on].alive, "{action}: sent to a dead member");
        match action {
            Action::Meet {
                ip, port, bus_port, ..
            } => {
                let addr = MemberAddr {
                    ip: *ip,
                    port: *port,
                    bus_port: *bus_port,
                };
                self.nodes[on].pending_meets.push(addr);
            }
            Action::AddSlotsRange { ranges, .. } => {
                assert!(self.nodes[on].primary.is_none(), "{action}: not a primary");
                for (k, n) in self.nodes.iter().enumerate() {
                    // A dead node nobody knows any more serves nothing.
                    if !n.alive
                        && !self
                            .nodes
                            .iter()
                            .any(|x| x.alive && x.knows.contains_key(&n.id))
                    {
                        continue;
                    }
                    let _ = k;
                    assert!(
                        n.slots.is_disjoint(ranges),
                        "{action}: slots already served by {}",
                        n.id.short()
                    );
                }
                let n = &mut self.nodes[on];
                n.slots = n.slots.union(ranges);
                n.holds = n.holds.union(ranges);
            }
            Action::Replicate { primary_id, .. } => {
                let n = &self.nodes[on];
                assert!(n.slots.is_empty(), "{action}: node serves slots");
                assert!(
                    n.primary.is_some() || self.keys(on) == 0,
                    "{action}: a primary with keys cannot replicate"
                );
                assert!(n.knows.contains_key(primary_id), "{action}: unknown node");
                let p = self.by_id(primary_id).unwrap();
                assert!(
                    self.nodes[p].primary.is_none(),
                    "{action}: target is not a primary"
                );
                let (holds, offset) = (self.nodes[p].holds.clone(), self.nodes[p].offset);
                let n = &mut self.nodes[on];
                n.primary = Some(primary_id.clone());
                n.holds = holds;
                n.offset = offset;
                n.stray_keys = 0;
                n.link_up = false;
                n.syncing = 1;
            }
            Action::Forget { node_id, .. } => {
                let n = &mut self.nodes[on];
                assert_ne!(&n.id, node_id, "{action}: can't forget myself");
                assert_ne!(
                    n.primary.as_ref(),
                    Some(node_id),
                    "{action}: can't forget my master"
                );
                assert!(n.knows.remove(node_id).is_some(), "{action}: unknown node");
                n.banned.insert(node_id.clone(), BAN_TICKS);
            }
            Action::Failover {
                mode: FailoverMode::Takeover,
                ..
            } => {
                let p = self
                    .by_id(
                        self.nodes[on]
                            .primary
                            .as_ref()
                            .expect("takeover on a replica"),
                    )
                    .unwrap();
                assert!(!self.nodes[p].alive, "{action}: the primary is alive");
                let old = self.nodes[p].id.clone();
                let best = self
                    .nodes
                    .iter()
                    .filter(|n| n.primary.as_ref() == Some(&old))
                    .map(|n| self.nodes[p].offset - n.lag)
                    .max();
                assert_eq!(
                    Some(self.nodes[p].offset - self.nodes[on].lag),
                    best,
                    "{action}: a replica further along exists"
                );
                self.promote(on, p);
            }
            Action::Failover { mode, .. } => {
                assert_eq!(*mode, FailoverMode::Default);
                let info = self.replication(on);
                let link = info.primary_link.clone().expect("failover on a replica");
                let p = self
                    .by_id(self.nodes[on].primary.as_ref().unwrap())
                    .unwrap();
                let primary_info = self.replication(p);
                assert!(
                    replica_sync(&primary_info, &info, opts.max_replica_lag_bytes).is_in_sync(),
                    "{action}: replica not in sync ({link:?})"
                );
                self.promote(on, p);
            }
            Action::MigrateSlots {
                ranges, target_id, ..
            } => {
                assert!(
                    ranges.is_subset(&self.nodes[on].slots),
                    "{action}: source does not serve them"
                );
                let t = self.by_id(target_id).expect("known target");
                assert!(
                    self.nodes[t].alive && self.nodes[t].primary.is_none(),
                    "{action}: target not a live primary"
                );
                assert!(
                    self.nodes[on].knows.contains_key(target_id),
                    "{action}: target unknown to source"
                );
                let source = self.nodes[on].id.clone();
                assert!(
                    !self.jobs.iter().any(|j| j.source == source
                        || j.target == source
                        || &j.target == target_id
                        || &j.source == target_id),
                    "{action}: node already in a running job"
                );
                self.jobs.push(Job {
                    source,
                    target: target_id.clone(),
                    slots: ranges.clone(),
                    ticks_left: 1,
                });
            }
            Action::ResetNode { mode, .. } => {
                assert!(
                    self.nodes[on].slots.is_empty() && self.keys(on) == 0,
                    "{action}: reset of a node with data"
                );
                let mut n = self.nodes[on].clone();
                n.knows.clear();
                n.primary = None;
                n.holds = SlotSet::new();
                n.link_up = false;
                n.pending_meets.clear();
                if *mode == ResetMode::Hard {
                    // A new node id: the old one is gone as if its node had died.
                    n.id = self.fresh_id();
                    n.banned.clear();
                    let member = n.member;
                    self.kill(member);
                    self.nodes.push(n);
                    self.current.insert(member, self.nodes.len() - 1);
                } else {
                    self.nodes[on] = n;
                }
            }
            Action::ConfigSet { key, value, .. } => {
                self.nodes[on].config.insert(key.clone(), value.clone());
            }
            // The simulator renders every config epoch as 0, so no view can
            // hold a stale higher one: asking for a bump here is a planner bug.
            Action::BumpEpoch { .. } => panic!("{action}: no stale epoch to bump"),
        }
    }

    /// Replica `r` takes over from primary `p`.
    fn promote(&mut self, r: usize, p: usize) {
        let slots = std::mem::take(&mut self.nodes[p].slots);
        let new_id = self.nodes[r].id.clone();
        let old_id = self.nodes[p].id.clone();
        {
            let n = &mut self.nodes[r];
            n.slots = slots;
            n.primary = None;
            n.lag = 0;
        }
        for i in 0..self.nodes.len() {
            if i != r && self.nodes[i].primary.as_ref() == Some(&old_id) {
                self.nodes[i].primary = Some(new_id.clone());
            }
        }
        if self.nodes[p].alive {
            self.nodes[p].primary = Some(new_id);
            self.nodes[p].link_up = true;
        } else {
            self.nodes[p].demoted_to = Some(new_id);
        }
    }

    fn component(&self, i: usize) -> BTreeSet<NodeId> {
        let mut seen: BTreeSet<NodeId> = BTreeSet::new();
        let mut todo = vec![i];
        while let Some(k) = todo.pop() {
            if !seen.insert(self.nodes[k].id.clone()) {
                continue;
            }
            for id in self.nodes[k].knows.keys() {
                if let Some(j) = self.by_id(id)
                    && self.nodes[j].alive
                {
                    todo.push(j);
                }
            }
        }
        seen
    }

    fn component_slots(&self, i: usize) -> SlotSet {
        self.component(i)
            .iter()
            .filter_map(|id| self.by_id(id))
            .fold(SlotSet::new(), |acc, j| acc.union(&self.nodes[j].slots))
    }

    /// Time passes: handshakes complete, gossip spreads, jobs finish, failures are
    /// detected, Valkey promotes replicas of dead primaries.
    #[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
    fn tick(&mut self) {
        // Handshakes.
        for i in 0..self.nodes.len() {
            let meets = std::mem::take(&mut self.nodes[i].pending_meets);
            if !self.nodes[i].alive {
                continue;
            }
            for addr in meets {
                let Some(t) = self.by_addr(&addr) else {
                    continue;
                };
                if t == i {
                    continue;
                }
                let (a, b) = (self.nodes[i].id.clone(), self.nodes[t].id.clone());
                let mine = self.component(i);
                if !mine.contains(&b) {
                    let disjoint = self.restoring
                        && self
                            .component_slots(i)
                            .is_disjoint(&self.component_slots(t));
                    assert!(
                        self.component_slots(i).is_empty()
                            || self.component_slots(t).is_empty()
                            || disjoint,
                        "MEET merged two clusters that both serve slots\n{}",
                        self.log.join("\n")
                    );
                }
                let (addr_a, addr_b) = (self.nodes[i].addr, self.nodes[t].addr);
                self.nodes[i].knows.insert(b.clone(), addr_b);
                self.nodes[t].knows.insert(a.clone(), addr_a);
                // Both now ping everyone they know, and gossip about failing nodes
                // carries the new addresses: peers update them.
                for n in self.nodes.iter_mut() {
                    if let Some(known) = n.knows.get_mut(&b) {
                        *known = addr_b;
                    }
                    if let Some(known) = n.knows.get_mut(&a) {
                        *known = addr_a;
                    }
                }
            }
        }
        // Stale views settle: a returning old primary becomes a replica.
        for n in &mut self.nodes {
            n.stale_self = None;
        }
        // Gossip: each live node learns the live nodes its live peers know, unless banned.
        for _ in 0..3 {
            let snapshot = self.nodes.clone();
            for (i, n) in self.nodes.iter_mut().enumerate() {
                if !n.alive {
                    continue;
                }
                for k in snapshot[i].knows.keys() {
                    let Some(j) = snapshot.iter().position(|x| &x.id == k) else {
                        continue;
                    };
                    if !snapshot[j].alive {
                        continue;
                    }
                    let mut learnt: Vec<(NodeId, MemberAddr)> = snapshot[j]
                        .knows
                        .iter()
                        .filter(|(x, _)| snapshot.iter().any(|y| &y.id == *x && y.alive))
                        .map(|(x, ad)| (x.clone(), *ad))
                        .collect();
                    learnt.push((snapshot[j].id.clone(), snapshot[j].addr));
                    for (x, ad) in learnt {
                        if x != n.id && !n.banned.contains_key(&x) {
                            n.knows.entry(x).or_insert(ad);
                        }
                    }
                }
            }
        }
        for n in &mut self.nodes {
            n.banned.retain(|_, t| {
                *t -= 1;
                *t > 0
            });
        }
        // Replication catches up.
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if !n.alive {
                continue;
            }
            if let Some(p) = n.primary.clone().and_then(|p| self.by_id(&p)) {
                let (holds, offset, alive) = (
                    self.nodes[p].holds.clone(),
                    self.nodes[p].offset,
                    self.nodes[p].alive,
                );
                let n = &mut self.nodes[i];
                if alive {
                    if n.syncing > 0 {
                        n.syncing -= 1;
                    } else {
                        n.link_up = true;
                        n.holds = holds;
                        n.offset = offset;
                    }
                } else {
                    n.link_up = false;
                }
            }
        }
        // Jobs finish.
        let mut done = Vec::new();
        for (k, j) in self.jobs.iter_mut().enumerate() {
            if j.ticks_left == 0 {
                done.push(k);
            } else {
                j.ticks_left -= 1;
            }
        }
        for k in done.into_iter().rev() {
            let j = self.jobs.remove(k);
            let (s, t) = (
                self.by_id(&j.source).unwrap(),
                self.by_id(&j.target).unwrap(),
            );
            self.nodes[s].slots = self.nodes[s].slots.difference(&j.slots);
            self.nodes[s].holds = self.nodes[s].holds.difference(&j.slots);
            self.nodes[t].slots = self.nodes[t].slots.union(&j.slots);
            self.nodes[t].holds = self.nodes[t].holds.union(&j.slots);
            for r in 0..self.nodes.len() {
                if self.nodes[r].primary.as_ref() == Some(&self.nodes[t].id)
                    && self.nodes[r].link_up
                {
                    self.nodes[r].holds = self.nodes[t].holds.clone();
                }
                if self.nodes[r].primary.as_ref() == Some(&self.nodes[s].id)
                    && self.nodes[r].link_up
                {
                    self.nodes[r].holds = self.nodes[s].holds.clone();
                }
            }
        }
        // Failure detection and Valkey's own failover, which needs the votes
        // of a majority of the primaries serving slots.
        let serving: Vec<bool> = self
            .nodes
            .iter()
            .filter(|n| !n.slots.is_empty())
            .map(|n| n.alive)
            .collect();
        let majority_up = serving.iter().filter(|up| **up).count() * 2 > serving.len();
        for i in 0..self.nodes.len() {
            if self.nodes[i].alive {
                continue;
            }
            self.nodes[i].dead_ticks += 1;
            if majority_up && self.nodes[i].dead_ticks >= 2 && !self.nodes[i].slots.is_empty() {
                let old = self.nodes[i].id.clone();
                let heir = (0..self.nodes.len()).find(|&r| {
                    let n = &self.nodes[r];
                    n.alive
                        && n.primary.as_ref() == Some(&old)
                        && n.holds.is_superset_of(&self.nodes[i].slots)
                });
                if let Some(r) = heir {
                    self.promote(r, i);
                }
            }
        }
    }

    fn check_no_loss(&self) {
        if self.loss_allowed {
            return;
        }
        for n in self.nodes.iter().filter(|n| n.alive && n.primary.is_none()) {
            let should = n.slots.intersection(&self.written);
            assert!(
                should.is_subset(&n.holds),
                "data lost: {} serves {} but holds only {}\n{}",
                n.id.short(),
                should,
                n.holds,
                self.log.join("\n")
            );
        }
    }
}

trait Superset {
    fn is_superset_of(&self, other: &SlotSet) -> bool;
}
impl Superset for SlotSet {
    fn is_superset_of(&self, other: &SlotSet) -> bool {
        other.is_subset(self)
    }
}

fn desired(shards: u32, replicas: u32) -> DesiredCluster {
    DesiredCluster {
        shards: (0..shards)
            .map(|s| DesiredShard::with_members(s, replicas + 1))
            .collect(),
        config: BTreeMap::new(),
        restore: None,
    }
}

/// Plans, applies and ticks until the plan is converged and the cluster healthy.
/// Returns every plan made.
fn converge(sim: &mut Sim, want: &DesiredCluster, rounds: usize) -> Vec<Plan> {
    let opts = PlannerOptions::default();
    let mut plans = Vec::new();
    for _ in 0..rounds {
        let observed = sim.observe();
        let plan = next_actions(want, &observed, &opts).unwrap();
        let h = health(want, &observed, &opts).unwrap();
        if plan.is_converged() && h.is_ready() {
            plans.push(plan);
            sim.check_no_loss();
            return plans;
        }
        for action in &plan.actions {
            sim.apply(action, &opts);
        }
        for r in &plan.removable {
            sim.delete(*r);
        }
        plans.push(plan);
        sim.tick();
        sim.check_no_loss();
    }
    let observed = sim.observe();
    panic!(
        "did not converge in {rounds} rounds.\nlast plan: {:#?}\nhealth: {:#?}\nlog:\n{}",
        plans.last(),
        health(want, &observed, &opts).unwrap(),
        sim.log.join("\n")
    );
}

fn plan_of(sim: &mut Sim, want: &DesiredCluster) -> Plan {
    let observed = sim.observe();
    next_actions(want, &observed, &PlannerOptions::default()).unwrap()
}

/// Checks the end state: balanced slots, each desired shard served by one of its
/// members with every other member following it.
fn assert_topology(sim: &Sim, want: &DesiredCluster) {
    let mut total = SlotSet::new();
    let n = want.shards.len() as u32;
    for shard in &want.shards {
        let members: Vec<&SimNode> = shard
            .members
            .iter()
            .map(|m| {
                sim.node(MemberRef {
                    shard: shard.index,
                    member: m.index,
                })
            })
            .collect();
        let primaries: Vec<&&SimNode> = members.iter().filter(|m| m.primary.is_none()).collect();
        assert_eq!(primaries.len(), 1, "shard {} primaries", shard.index);
        let p = primaries[0];
        let count = p.slots.len();
        assert!(
            count == 16384 / n || count == 16384 / n + 1,
            "shard {} has {count} slots",
            shard.index
        );
        assert!(total.is_disjoint(&p.slots));
        total = total.union(&p.slots);
        for m in &members {
            if m.id != p.id {
                assert_eq!(m.primary.as_ref(), Some(&p.id));
            }
        }
        if let Some(want_primary) = shard.primary {
            assert_eq!(p.member.member, want_primary);
        }
    }
    assert!(total.is_full());
}

fn kinds(plan: &Plan) -> Vec<&'static str> {
    plan.actions.iter().map(Action::kind).collect()
}

/// `replica` follows `primary` in the simulated cluster.
fn assert_follows(sim: &Sim, replica: MemberRef, primary: MemberRef) {
    let id = sim.node(primary).id.clone();
    assert_eq!(sim.node(replica).primary.as_ref(), Some(&id));
}

/// Whether `plan` has an action of `kind`.
fn has(plan: &Plan, kind: &str) -> bool {
    plan.actions.iter().any(|a| a.kind() == kind)
}

/// Whether `plan` makes any member FORGET node `id`.
fn forgets(plan: &Plan, id: &NodeId) -> bool {
    plan.actions
        .iter()
        .any(|a| matches!(a, Action::Forget { node_id, .. } if node_id == id))
}

/// Every action of `plans`, in order.
fn all_actions(plans: &[Plan]) -> impl Iterator<Item = &Action> {
    plans.iter().flat_map(|p| p.actions.iter())
}

/// Every member `plans` let go.
fn removed(plans: &[Plan]) -> BTreeSet<MemberRef> {
    plans
        .iter()
        .flat_map(|p| p.removable.iter().copied())
        .collect()
}

/// The first Failover of `plan`.
fn failover(plan: &Plan) -> &Action {
    plan.actions
        .iter()
        .find(|a| a.kind() == "Failover")
        .expect("a Failover action")
}

/// The health of the simulated cluster against `want`.
fn health_of(sim: &mut Sim, want: &DesiredCluster) -> Health {
    health(want, &sim.observe(), &PlannerOptions::default()).unwrap()
}

/// Carries out every action of `plan` (default options), then lets one tick
/// pass.
fn step(sim: &mut Sim, plan: &Plan) {
    for a in &plan.actions {
        sim.apply(a, &PlannerOptions::default());
    }
    sim.tick();
}

// ---------------------------------------------------------------- bootstrap

#[test]
fn bootstrap_meets_every_member_from_shard_zero_member_zero_by_ip() {
    let mut sim = Sim::cluster(3, 1);
    let plan = plan_of(&mut sim, &desired(3, 1));
    let meets: Vec<&Action> = plan.actions.iter().filter(|a| a.kind() == "Meet").collect();
    let from_anchor = meets
        .iter()
        .filter(|m| m.on() == MemberRef::new(0, 0))
        .count();
    assert_eq!(from_anchor, 5);
    // The other five meet pairwise at once, once per pair.
    assert_eq!(meets.len(), 5 + 5 * 4 / 2);
    // Nothing else before the members have met.
    assert_eq!(kinds(&plan), vec!["Meet"; 15]);
}

#[test]
fn a_fresh_cluster_meets_pairwise_and_agrees_after_one_round() {
    let mut sim = Sim::cluster(3, 2);
    let want = desired(3, 2);
    let first = plan_of(&mut sim, &want);
    // 8 MEETs from the anchor, 8 * 7 / 2 among the others.
    assert_eq!(first.actions.len(), 8 + 28);
    step(&mut sim, &first);
    // Once met, nobody meets again.
    let second = plan_of(&mut sim, &want);
    assert!(
        second.actions.iter().all(|a| a.kind() != "Meet"),
        "{:?}",
        kinds(&second)
    );
}

#[test]
fn a_cluster_beyond_the_mesh_limit_meets_from_the_anchor_only() {
    // 11 shards x 3 = 33 members, one over the limit.
    let mut sim = Sim::cluster(11, 2);
    let plan = plan_of(&mut sim, &desired(11, 2));
    const { assert!(33 > MESH_MEET_LIMIT) };
    assert!(
        plan.actions
            .iter()
            .all(|a| a.kind() == "Meet" && a.on() == MemberRef::new(0, 0))
    );
    assert_eq!(plan.actions.len(), 32);
}

#[test]
fn bootstrap_waits_for_handshakes_before_anything_else() {
    let mut sim = Sim::cluster(2, 1);
    let want = desired(2, 1);
    let plan = plan_of(&mut sim, &want);
    for a in &plan.actions {
        sim.apply(a, &PlannerOptions::default());
    }
    let plan = plan_of(&mut sim, &want);
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert!(plan.waiting.iter().any(|w| w.reason() == "WaitingForMeet"));
}

#[test]
fn bootstrap_adds_slots_evenly_to_member_zero_and_replicates_the_others() {
    let mut sim = Sim::cluster(3, 1);
    let want = desired(3, 1);
    let plans = converge(&mut sim, &want, 20);
    let adds: Vec<(MemberRef, SlotSet)> = all_actions(&plans)
        .filter_map(|a| match a {
            Action::AddSlotsRange { on, ranges } => Some((*on, ranges.clone())),
            _ => None,
        })
        .collect();
    let split = slots::even_split(3).unwrap();
    assert_eq!(
        adds,
        (0..3)
            .map(|s| (MemberRef::new(s, 0), SlotSet::from_range(split[s as usize])))
            .collect::<Vec<_>>()
    );
    let replicates: Vec<MemberRef> = all_actions(&plans)
        .filter(|a| a.kind() == "Replicate")
        .map(Action::on)
        .collect();
    assert_eq!(
        replicates,
        vec![
            MemberRef::new(0, 1),
            MemberRef::new(1, 1),
            MemberRef::new(2, 1)
        ]
    );
    assert_topology(&sim, &want);
    assert!(plans.len() <= 6, "bootstrap took {} rounds", plans.len());
}

#[test]
fn bootstrap_waits_for_every_reachable_member_to_join_before_adding_slots() {
    let mut sim = Sim::cluster(2, 0);
    let want = desired(2, 0);
    let observed = sim.observe();
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert!(!kinds(&plan).contains(&"AddSlotsRange"));
}

#[test]
fn an_interrupted_bootstrap_finishes_the_same_split() {
    let mut sim = Sim::cluster(3, 0);
    let want = desired(3, 0);
    // Meet, then only shard 0's slots got added before the operator was cut off.
    for _ in 0..2 {
        let plan = plan_of(&mut sim, &want);
        for a in plan.actions.iter().filter(|a| a.kind() == "Meet") {
            sim.apply(a, &PlannerOptions::default());
        }
        sim.tick();
    }
    let plan = plan_of(&mut sim, &want);
    let first_add = plan
        .actions
        .iter()
        .find(|a| a.kind() == "AddSlotsRange")
        .unwrap()
        .clone();
    sim.apply(&first_add, &PlannerOptions::default());
    sim.tick();
    converge(&mut sim, &want, 20);
    let split = slots::even_split(3).unwrap();
    for s in 0..3 {
        assert_eq!(
            sim.node(MemberRef::new(s, 0)).slots,
            SlotSet::from_range(split[s as usize])
        );
    }
}

#[test]
fn a_desired_member_that_is_down_at_bootstrap_holds_its_shard_but_not_the_others() {
    let mut sim = Sim::cluster(2, 0);
    sim.kill(MemberRef::new(1, 0));
    let want = desired(2, 0);
    let mut saw_primary_wait = false;
    for _ in 0..6 {
        let plan = plan_of(&mut sim, &want);
        saw_primary_wait |= plan
            .waiting
            .iter()
            .any(|w| matches!(w, Wait::WaitingForPrimary { shard } if shard.0 == 1));
        step(&mut sim, &plan);
    }
    assert!(saw_primary_wait);
    assert!(sim.node(MemberRef::new(1, 0)).slots.is_empty());
    sim.restart(MemberRef::new(1, 0));
    converge(&mut sim, &want, 20);
    assert_topology(&sim, &want);
}

// ---------------------------------------------------------------- recovery

fn healthy(shards: u32, replicas: u32) -> (Sim, DesiredCluster) {
    let mut sim = Sim::cluster(shards, replicas);
    let want = desired(shards, replicas);
    converge(&mut sim, &want, 30);
    sim.write_everything();
    sim.tick();
    (sim, want)
}

/// A healthy cluster of `from` (shards, replicas) whose spec now asks for `to`.
fn scaled(from: (u32, u32), to: (u32, u32)) -> (Sim, DesiredCluster) {
    let (sim, _) = healthy(from.0, from.1);
    (sim, desired(to.0, to.1))
}

#[test]
fn a_converged_cluster_gets_no_action() {
    let (mut sim, want) = healthy(3, 1);
    let plan = plan_of(&mut sim, &want);
    assert!(plan.is_converged(), "{plan:#?}");
    let h = health_of(&mut sim, &want);
    assert!(h.is_ready(), "{h:#?}");
    assert_eq!(h.ready_shards, 3);
}

#[test]
fn a_member_whose_ip_changed_is_met_again_at_its_new_address() {
    let (mut sim, want) = healthy(3, 1);
    // Every node now has the old address in its view.
    sim.move_ip(MemberRef::new(1, 1));
    let new_addr = sim.node(MemberRef::new(1, 1)).addr;
    let plan = plan_of(&mut sim, &want);
    assert!(plan.actions.contains(&Action::Meet {
        on: MemberRef::new(0, 0),
        ip: new_addr.ip,
        port: new_addr.port,
        bus_port: new_addr.bus_port,
    }));
}

#[test]
fn a_recreated_empty_replica_is_met_attached_and_its_old_id_forgotten_everywhere() {
    let (mut sim, want) = healthy(3, 1);
    let old = sim.node(MemberRef::new(2, 1)).id.clone();
    sim.recreate(MemberRef::new(2, 1));
    let plans = converge(&mut sim, &want, 20);
    let forgets: Vec<MemberRef> = all_actions(&plans)
        .filter_map(|a| match a {
            Action::Forget { on, node_id } if *node_id == old => Some(*on),
            _ => None,
        })
        .collect();
    // All five other members forget the old id, in the same plan.
    assert_eq!(forgets.len(), 5);
    let plan_with_forgets = plans.iter().filter(|p| has(p, "Forget")).count();
    assert_eq!(plan_with_forgets, 1);
    assert_topology(&sim, &want);
}

#[test]
fn a_dead_node_nobody_claims_is_forgotten_only_once_marked_failed() {
    let (mut sim, want) = healthy(2, 1);
    sim.track_ids = false;
    // The replica's pod is replaced; the old process is not yet known to be dead.
    let old = sim.node(MemberRef::new(0, 1)).id.clone();
    let i = sim.idx(MemberRef::new(0, 1));
    sim.nodes[i].alive = false;
    sim.nodes[i].dead_ticks = 0;
    sim.add(MemberRef::new(0, 1));
    let plan = plan_of(&mut sim, &want);
    assert!(!forgets(&plan, &old));
    assert!(plan.waiting.contains(&Wait::WaitingForFailureDetection {
        node_id: old.clone()
    }));
    converge(&mut sim, &want, 20);
    assert!(
        sim.nodes
            .iter()
            .filter(|n| n.alive)
            .all(|n| !n.knows.contains_key(&old))
    );
}

#[test]
fn a_killed_primary_that_returns_with_its_data_rejoins_as_a_replica() {
    let (mut sim, want) = healthy(3, 1);
    let m0 = MemberRef::new(1, 0);
    sim.kill(m0);
    // Valkey fails over on its own; the planner only waits meanwhile.
    let plan = plan_of(&mut sim, &want);
    assert!(
        !plan.actions.iter().any(|a| a.kind() != "ConfigSet"),
        "{:?}",
        plan.actions
    );
    assert!(
        plan.waiting
            .iter()
            .any(|w| w.reason() == "WaitingForFailover")
    );
    sim.tick();
    sim.tick();
    assert!(sim.node(MemberRef::new(1, 1)).primary.is_none());
    sim.restart(m0);
    // Its stale view must not be acted on.
    let plan = plan_of(&mut sim, &want);
    assert!(
        plan.actions.iter().all(|a| a.on() != m0),
        "{:?}",
        plan.actions
    );
    assert!(
        plan.waiting
            .iter()
            .any(|w| w.reason() == "WaitingForViewsToAgree")
    );
    converge(&mut sim, &want, 20);
    assert_follows(&sim, m0, MemberRef::new(1, 1));
}

#[test]
fn a_killed_primary_that_returns_empty_joins_as_a_replica_of_the_promoted_one() {
    let (mut sim, want) = healthy(3, 1);
    let m0 = MemberRef::new(0, 0);
    sim.kill(m0);
    sim.tick();
    sim.tick();
    sim.recreate(m0);
    let plans = converge(&mut sim, &want, 20);
    let replicated = |a: &Action| matches!(a, Action::Replicate { on, .. } if *on == m0);
    assert!(all_actions(&plans).any(replicated));
    assert_follows(&sim, m0, MemberRef::new(0, 1));
}

fn takeovers(plan: &Plan) -> Vec<MemberRef> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Failover {
                on,
                mode: FailoverMode::Takeover,
            } => Some(*on),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_primary_without_a_majority_to_elect_is_replaced_by_its_furthest_replica() {
    for shards in [1, 2] {
        let (mut sim, want) = healthy(shards, 2);
        let behind = MemberRef::new(0, 1);
        let i = sim.idx(behind);
        sim.nodes[i].lag = 10;
        let primary = MemberRef::new(0, 0);
        sim.kill(primary);
        sim.tick();
        sim.tick();
        // Valkey cannot elect (1 of 1 or 1 of 2 primaries up): nobody was promoted.
        assert_eq!(
            sim.node(MemberRef::new(0, 2)).primary.as_ref(),
            Some(&sim.node(primary).id)
        );
        let plan = plan_of(&mut sim, &want);
        assert_eq!(
            takeovers(&plan),
            vec![MemberRef::new(0, 2)],
            "{shards} shard(s)"
        );
        step(&mut sim, &plan);
        // The old primary's pod restarts empty, under a new id, and joins as a replica.
        sim.recreate(primary);
        converge(&mut sim, &want, 20);
        assert_follows(&sim, primary, MemberRef::new(0, 2));
        assert_follows(&sim, behind, MemberRef::new(0, 2));
    }
}

#[test]
fn valkey_elects_by_itself_when_a_majority_of_primaries_is_up() {
    let (mut sim, want) = healthy(3, 1);
    sim.kill(MemberRef::new(0, 0));
    let plan = plan_of(&mut sim, &want);
    assert!(takeovers(&plan).is_empty(), "{:?}", plan.actions);
}

#[test]
fn no_takeover_while_a_replica_that_may_hold_the_latest_writes_does_not_answer() {
    let (mut sim, want) = healthy(1, 2);
    sim.kill(MemberRef::new(0, 0));
    sim.kill(MemberRef::new(0, 1));
    sim.tick();
    let plan = plan_of(&mut sim, &want);
    assert!(takeovers(&plan).is_empty(), "{:?}", plan.actions);
    // It answers again: now the furthest of the two is promoted.
    sim.restart(MemberRef::new(0, 1));
    let plan = plan_of(&mut sim, &want);
    assert_eq!(takeovers(&plan).len(), 1, "{:?}", plan.actions);
}

#[test]
fn no_takeover_while_a_replica_is_still_linked_to_its_primary() {
    let (mut sim, want) = healthy(1, 1);
    let primary = MemberRef::new(0, 0);
    // The operator cannot reach the primary, but its replica can.
    let mut observed = sim.observe();
    for m in &mut observed.members {
        if m.member == primary {
            m.state = MemberState::Unreachable {
                reason: "timed out".into(),
            };
        }
    }
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert!(takeovers(&plan).is_empty(), "{:?}", plan.actions);
}

#[test]
fn a_replaced_primary_is_not_forgotten_while_its_replica_still_follows_it() {
    let (mut sim, want) = healthy(2, 1);
    let m0 = MemberRef::new(1, 0);
    let old = sim.node(m0).id.clone();
    // The pod comes back empty before Valkey has promoted the replica.
    sim.recreate(m0);
    let plan = plan_of(&mut sim, &want);
    assert!(!forgets(&plan, &old));
    assert!(plan.waiting.contains(&Wait::WaitingForReplicasToMove {
        node_id: old.clone()
    }));
    converge(&mut sim, &want, 20);
    assert_topology(&sim, &want);
}

#[test]
fn an_unreachable_member_with_an_unknown_id_is_not_forgotten_by_address() {
    let (mut sim, want) = healthy(2, 1);
    sim.track_ids = false;
    let m = MemberRef::new(1, 1);
    let old = sim.node(m).id.clone();
    sim.kill(m);
    for _ in 0..4 {
        let plan = plan_of(&mut sim, &want);
        assert!(!forgets(&plan, &old));
        sim.tick();
    }
}

#[test]
fn a_replaced_primary_without_replicas_has_its_lost_slots_given_to_its_new_self() {
    let (mut sim, want) = healthy(2, 0);
    sim.loss_allowed = true;
    let m = MemberRef::new(1, 0);
    let lost = sim.node(m).slots.clone();
    sim.recreate(m);
    converge(&mut sim, &want, 20);
    assert_eq!(sim.node(m).slots, lost);
}

#[test]
fn a_slot_owner_nobody_claims_blocks_instead_of_being_forgotten() {
    let (mut sim, want) = healthy(2, 0);
    sim.track_ids = false;
    sim.recorded.clear();
    let m = MemberRef::new(1, 0);
    let old = sim.node(m).id.clone();
    // Its pod is gone for good and a new one came up elsewhere: nothing proves the
    // old node is this member's former self, so its slots are not given up.
    let i = sim.idx(m);
    sim.nodes[i].alive = false;
    sim.nodes[i].addr.port = 7000;
    sim.add(m);
    for _ in 0..4 {
        let plan = plan_of(&mut sim, &want);
        assert!(!forgets(&plan, &old));
        assert!(!has(&plan, "AddSlotsRange"));
        step(&mut sim, &plan);
    }
    let plan = plan_of(&mut sim, &want);
    assert!(plan.is_blocked());
    assert!(
        plan.waiting
            .iter()
            .any(|w| matches!(w, Wait::OrphanOwnsSlots { node_id, .. } if *node_id == old))
    );
}

/// A dead node of some other cluster that serves `slots` (nobody here knows it).
fn stranger(sim: &mut Sim, slots: SlotSet) -> NodeId {
    let id = sim.fresh_id();
    let addr = sim.fresh_addr();
    let mut ghost = sim.nodes[0].clone();
    ghost.id = id.clone();
    ghost.addr = addr;
    ghost.alive = false;
    ghost.dead_ticks = 5;
    ghost.slots = slots;
    ghost.knows = BTreeMap::new();
    ghost.member = MemberRef::new(99, 99);
    sim.nodes.push(ghost);
    id
}

/// Makes the cluster forget member `m` entirely, as if it had been removed.
fn forgotten_by_everyone(sim: &mut Sim, m: MemberRef) {
    let me = sim.node(m).id.clone();
    for n in sim.nodes.iter_mut() {
        n.knows.remove(&me);
    }
    sim.recorded.remove(&m);
}

/// The plan resets member `m` under a new node id.
fn assert_resets_hard(plan: &Plan, m: MemberRef) {
    assert!(
        plan.actions.contains(&Action::ResetNode {
            on: m,
            mode: ResetMode::Hard
        }),
        "{:?}",
        plan.actions
    );
}

#[test]
fn an_empty_member_with_a_view_of_another_cluster_is_reset_then_met() {
    let (mut sim, want) = healthy(2, 1);
    let m = MemberRef::new(1, 1);
    forgotten_by_everyone(&mut sim, m);
    // It knows a node of an old cluster that served slots.
    let old = stranger(
        &mut sim,
        SlotSet::from_range(SlotRange::from_numbers(0, 10).unwrap()),
    );
    let i = sim.idx(m);
    let addr = sim.nodes.last().unwrap().addr;
    sim.nodes[i].knows = [(old, addr)].into_iter().collect();
    sim.nodes[i].primary = None;
    sim.nodes[i].holds = SlotSet::new();
    let plan = plan_of(&mut sim, &want);
    assert_resets_hard(&plan, m);
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Meet { ip, .. } if *ip == sim.node(m).addr.ip))
    );
    converge(&mut sim, &want, 20);
    assert_topology(&sim, &want);
}

#[test]
fn a_shard_back_on_retained_volumes_is_reset_under_new_ids_and_never_the_anchor() {
    // 3x1 scaled in to 2 shards: shard 2 is drained, removed and forgotten.
    let (mut sim, two) = scaled((3, 1), (2, 1));
    converge(&mut sim, &two, 40);
    // It comes back on its retained volumes: the old nodes.conf (a view of the
    // whole old cluster, everyone else included) and new pod IPs.
    let back = [MemberRef::new(2, 0), MemberRef::new(2, 1)];
    for m in back {
        let i = sim.nodes.iter().rposition(|n| n.member == m).unwrap();
        assert!(
            !sim.nodes[i].knows.is_empty(),
            "a stale view to come back with"
        );
        let addr = sim.fresh_addr();
        let n = &mut sim.nodes[i];
        n.alive = true;
        n.dead_ticks = 0;
        n.addr = addr;
        sim.current.insert(m, i);
    }
    let old_ids: Vec<NodeId> = back.iter().map(|m| sim.node(*m).id.clone()).collect();
    let three = desired(3, 1);
    let first = plan_of(&mut sim, &three);
    for m in back {
        assert_resets_hard(&first, m);
    }
    let plans = converge(&mut sim, &three, 40);
    assert!(
        !all_actions(&plans).any(|a| matches!(a, Action::Meet { on, .. } if back.contains(on))),
        "a returning member with a stale view was used as the anchor:\n{}",
        sim.log.join("\n")
    );
    assert_topology(&sim, &three);
    for (m, old) in back.iter().zip(&old_ids) {
        assert_ne!(&sim.node(*m).id, old, "{m} kept its forgotten id");
    }
}

#[test]
fn a_member_with_data_of_another_cluster_is_never_merged() {
    let (mut sim, want) = healthy(2, 0);
    // Member 1/0 split off on its own, still serving its slots and holding keys.
    let m = MemberRef::new(1, 0);
    forgotten_by_everyone(&mut sim, m);
    let i = sim.idx(m);
    sim.nodes[i].knows = BTreeMap::new();
    sim.nodes[i].stray_keys = 10;
    for _ in 0..3 {
        let plan = plan_of(&mut sim, &want);
        let addr = sim.node(m).addr;
        assert!(
            !plan.actions.iter().any(|a| a.on() == m),
            "{:?}",
            plan.actions
        );
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::Meet { ip, .. } if *ip == addr.ip))
        );
        assert!(!has(&plan, "AddSlotsRange"));
        assert!(plan.waiting.contains(&Wait::SeparateCluster { member: m }));
        step(&mut sim, &plan);
    }
}

#[test]
fn a_primary_without_slots_holding_keys_is_not_replicated_over() {
    let (mut sim, want) = healthy(1, 1);
    let r = MemberRef::new(0, 1);
    let i = sim.idx(r);
    sim.nodes[i].primary = None;
    sim.nodes[i].stray_keys = 5;
    sim.tick();
    let plan = plan_of(&mut sim, &want);
    assert!(!has(&plan, "Replicate"));
    assert!(plan.waiting.contains(&Wait::MemberHoldsKeys { member: r }));
}

// ---------------------------------------------------------------- replicas

#[test]
fn scaling_replicas_up_attaches_the_new_members() {
    let (mut sim, want) = scaled((3, 1), (3, 2));
    for s in 0..3 {
        sim.add(MemberRef::new(s, 2));
    }
    converge(&mut sim, &want, 20);
    assert_topology(&sim, &want);
}

#[test]
fn scaling_replicas_down_removes_replicas_without_touching_primaries() {
    let (mut sim, want) = scaled((3, 2), (3, 1));
    let plans = converge(&mut sim, &want, 20);
    assert!(!all_actions(&plans).any(|a| a.kind() == "Failover"));
    assert_eq!(
        removed(&plans),
        (0..3).map(|s| MemberRef::new(s, 2)).collect()
    );
    assert_topology(&sim, &want);
}

#[test]
fn a_leaving_live_primary_hands_over_to_an_in_sync_replica_before_removal() {
    let (mut sim, _) = healthy(2, 2);
    // Shard 1 fails over so that member 2 is its primary; then replicas go 2 -> 1.
    let m2 = MemberRef::new(1, 2);
    let m0 = sim.idx(MemberRef::new(1, 0));
    let m2i = sim.idx(m2);
    sim.promote(m2i, m0);
    sim.tick();
    let want = desired(2, 1);
    let plan = plan_of(&mut sim, &want);
    assert!(
        !plan.removable.contains(&m2),
        "removable while it is the live primary"
    );
    assert_eq!(failover(&plan).on(), MemberRef::new(1, 0));
    converge(&mut sim, &want, 20);
    assert_topology(&sim, &want);
}

#[test]
fn the_failover_target_follows_the_callers_preference() {
    let (mut sim, _) = healthy(1, 2);
    let m0 = sim.idx(MemberRef::new(0, 0));
    let m2 = sim.idx(MemberRef::new(0, 2));
    sim.promote(m2, m0);
    sim.tick();
    // Member 2 leaves; the operator prefers member 1 over member 0.
    let mut want = desired(1, 1);
    want.shards[0].failover_preference = vec![MemberIndex::Member(1), MemberIndex::Member(0)];
    let plan = plan_of(&mut sim, &want);
    assert_eq!(failover(&plan).on(), MemberRef::new(0, 1));
}

#[test]
fn a_leaving_primary_with_no_in_sync_replica_is_kept() {
    let (mut sim, _) = healthy(1, 1);
    let m0 = sim.idx(MemberRef::new(0, 0));
    let m1 = sim.idx(MemberRef::new(0, 1));
    sim.promote(m1, m0);
    sim.tick();
    sim.tick();
    // Replicas go 1 -> 0 while the remaining member 0 is far behind.
    sim.nodes[m0].lag = 50 * 1024 * 1024;
    let want = desired(1, 0);
    let plan = plan_of(&mut sim, &want);
    assert!(!has(&plan, "Failover"));
    assert!(plan.removable.is_empty());
    assert!(plan.waiting.contains(&Wait::WaitingForSync {
        shard: ShardIndex(0),
        member: MemberRef::new(0, 0)
    }));
}

// ---------------------------------------------------------------- planned failover

#[test]
fn a_planned_failover_goes_to_the_desired_member_once_in_sync() {
    let (mut sim, mut want) = healthy(3, 1);
    want.shards[1].primary = Some(MemberIndex::Member(1));
    let r = sim.idx(MemberRef::new(1, 1));
    sim.nodes[r].lag = 10 * 1024 * 1024;
    let plan = plan_of(&mut sim, &want);
    assert!(!has(&plan, "Failover"));
    assert!(plan.waiting.contains(&Wait::WaitingForSync {
        shard: ShardIndex(1),
        member: MemberRef::new(1, 1)
    }));
    let h = health_of(&mut sim, &want);
    assert!(h.issues.iter().any(|i| i.reason() == "PrimaryNotPreferred"));
    sim.nodes[r].lag = 0;
    let plans = converge(&mut sim, &want, 10);
    let failovers: Vec<&Action> = all_actions(&plans)
        .filter(|a| a.kind() == "Failover")
        .collect();
    assert_eq!(
        failovers,
        vec![&Action::Failover {
            on: MemberRef::new(1, 1),
            mode: FailoverMode::Default
        }]
    );
    assert_topology(&sim, &want);
}

#[test]
fn planned_failovers_go_one_shard_at_a_time() {
    let (mut sim, mut want) = healthy(3, 1);
    for s in &mut want.shards {
        s.primary = Some(MemberIndex::Member(1));
    }
    let plans = converge(&mut sim, &want, 20);
    for p in &plans {
        assert!(p.actions.iter().filter(|a| a.kind() == "Failover").count() <= 1);
    }
    assert_topology(&sim, &want);
}

#[test]
fn in_sync_means_link_up_no_sync_and_offset_close() {
    let primary = ReplicationInfo {
        role: Role::Primary,
        repl_offset: 10_000,
        connected_replicas: 1,
        replicas: vec![],
        primary_link: None,
    };
    let mut replica = ReplicationInfo {
        role: Role::Replica,
        repl_offset: 9_990,
        connected_replicas: 0,
        replicas: vec![],
        primary_link: Some(PrimaryLink {
            host: "10.0.0.1".into(),
            port: 6379,
            link_up: true,
            sync_in_progress: false,
            repl_offset: 9_990,
            last_io_seconds_ago: Some(0),
        }),
    };
    assert_eq!(
        replica_sync(&primary, &replica, 100),
        ReplicaSync::InSync { lag: 10 }
    );
    assert_eq!(
        replica_sync(&primary, &replica, 5),
        ReplicaSync::Behind { lag: 10 }
    );
    replica.primary_link.as_mut().unwrap().sync_in_progress = true;
    assert_eq!(replica_sync(&primary, &replica, 100), ReplicaSync::Syncing);
    replica.primary_link.as_mut().unwrap().link_up = false;
    assert_eq!(replica_sync(&primary, &replica, 100), ReplicaSync::LinkDown);
    // A replica read after the primary may be ahead: no lag.
    let mut ahead = replica.clone();
    let link = ahead.primary_link.as_mut().unwrap();
    link.link_up = true;
    link.sync_in_progress = false;
    link.repl_offset = 10_050;
    assert_eq!(
        replica_sync(&primary, &ahead, 0),
        ReplicaSync::InSync { lag: 0 }
    );
}

#[test]
fn in_sync_between_two_members_needs_the_replica_to_follow_that_primary() {
    let a = "a".repeat(40);
    let b = "b".repeat(40);
    let c = "c".repeat(40);
    let report = |myself: &str, text: &str, replication: &str| NodeReport {
        nodes: ClusterNodes::parse(text).unwrap(),
        replication: ReplicationInfo::parse(replication).unwrap(),
        slot_migrations: vec![],
        keys: 0,
        config: BTreeMap::new(),
        cluster_state_ok: myself == "ok",
        version: None,
        modules: Vec::new(),
    };
    let primary = report(
        "ok",
        &format!("{a} 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-16383\n"),
        "role:master\nmaster_repl_offset:1000\nconnected_slaves:1\n",
    );
    let follows = |primary_id: &str| {
        report(
            "ok",
            &format!(
                "{b} 10.0.0.2:6379@16379 myself,slave {primary_id} 0 0 1 connected\n\
                 {a} 10.0.0.1:6379@16379 master - 0 0 1 connected 0-16383\n"
            ),
            "role:slave\nmaster_host:10.0.0.1\nmaster_port:6379\nmaster_link_status:up\n\
             master_sync_in_progress:0\nslave_repl_offset:990\nmaster_repl_offset:990\n",
        )
    };
    assert_eq!(
        sync_between(&primary, &follows(&a), 100),
        ReplicaSync::InSync { lag: 10 }
    );
    // The same offsets, but it says it follows another node.
    assert_eq!(
        sync_between(&primary, &follows(&c), 100),
        ReplicaSync::NotReplicating
    );
}

#[test]
fn choosing_a_target_takes_the_first_in_sync_member_of_the_preference() {
    let a = MemberRef::new(0, 1);
    let b = MemberRef::new(0, 2);
    let c = MemberRef::new(0, 3);
    let states: BTreeMap<MemberRef, ReplicaSync> = [
        (a, ReplicaSync::Behind { lag: 9 }),
        (b, ReplicaSync::InSync { lag: 0 }),
        (c, ReplicaSync::InSync { lag: 0 }),
    ]
    .into_iter()
    .collect();
    assert_eq!(choose_failover_target(&[a, c, b], &states), Some(c));
    assert_eq!(choose_failover_target(&[a], &states), None);
}

// ---------------------------------------------------------------- shards

#[test]
fn scaling_shards_out_migrates_a_balanced_share_to_the_new_shard_after_its_replicas() {
    let (mut sim, want) = scaled((3, 1), (4, 1));
    sim.add(MemberRef::new(3, 0));
    sim.add(MemberRef::new(3, 1));
    let plans = converge(&mut sim, &want, 40);
    let mut replicated_new = false;
    let mut moved = 0;
    for p in &plans {
        for a in &p.actions {
            match a {
                Action::Replicate { on, .. } if on.shard.0 == 3 => replicated_new = true,
                Action::MigrateSlots { ranges, .. } => {
                    assert!(
                        replicated_new,
                        "slots moved before the new shard's replica was attached"
                    );
                    moved += ranges.len();
                }
                Action::AddSlotsRange { .. } => panic!("no slot is unassigned during scale-out"),
                _ => {}
            }
        }
    }
    assert_eq!(moved, 4096, "only the new shard's share moves");
    assert_topology(&sim, &want);
}

#[test]
fn a_held_shard_takes_no_slots_until_released() {
    let (mut sim, mut want) = scaled((2, 1), (3, 1));
    sim.add(MemberRef::new(2, 0));
    sim.add(MemberRef::new(2, 1));
    want.shards[2].hold_slots = true;
    let mut plans = Vec::new();
    for _ in 0..25 {
        let plan = plan_of(&mut sim, &want);
        step(&mut sim, &plan);
        plans.push(plan);
    }
    assert!(plans.iter().all(|p| !has(p, "MigrateSlots")));
    let last = plans.last().unwrap();
    assert!(
        last.waiting.contains(&Wait::WaitingForClientAddress {
            shard: ShardIndex(2)
        }),
        "{:?}",
        last.waiting
    );
    want.shards[2].hold_slots = false;
    converge(&mut sim, &want, 40);
    assert_topology(&sim, &want);
}

#[test]
fn slots_move_into_a_new_shard_only_once_its_members_run_their_settings() {
    let (mut sim, mut want) = scaled((2, 1), (3, 1));
    sim.add(MemberRef::new(2, 0));
    sim.add(MemberRef::new(2, 1));
    // The new replica announces the wrong client address until told.
    let i = sim.idx(MemberRef::new(2, 1));
    sim.nodes[i]
        .config
        .insert("cluster-announce-client-ipv4".into(), String::new());
    want.shards[2].members[1].config = [(
        "cluster-announce-client-ipv4".to_string(),
        "192.0.2.7".to_string(),
    )]
    .into_iter()
    .collect();
    let plans = converge(&mut sim, &want, 40);
    let set = plans
        .iter()
        .position(|p| {
            p.actions
                .iter()
                .any(|a| matches!(a, Action::ConfigSet { on, .. } if *on == MemberRef::new(2, 1)))
        })
        .expect("the new member is told its address");
    let first_move = plans
        .iter()
        .position(|p| has(p, "MigrateSlots"))
        .expect("slots move in");
    assert!(
        set < first_move,
        "slots moved at {first_move}, settings set at {set}"
    );
    assert_topology(&sim, &want);
}

#[test]
fn nothing_moves_while_a_slot_migration_runs() {
    let (mut sim, want) = scaled((2, 0), (3, 0));
    sim.add(MemberRef::new(2, 0));
    let mut saw_running = false;
    for _ in 0..20 {
        let observed = sim.observe();
        let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
        if !sim.jobs.is_empty() {
            saw_running = true;
            assert!(
                plan.actions
                    .iter()
                    .all(|a| !matches!(a.kind(), "MigrateSlots" | "Failover" | "AddSlotsRange"))
            );
            assert!(
                plan.waiting
                    .iter()
                    .any(|w| w.reason() == "WaitingForSlotMigration")
            );
        }
        step(&mut sim, &plan);
    }
    assert!(saw_running);
    assert_topology(&sim, &want);
}

#[test]
fn scaling_shards_in_drains_slots_before_the_members_may_go() {
    let (mut sim, want) = scaled((4, 1), (3, 1));
    let plans = converge(&mut sim, &want, 40);
    let mut drained = false;
    for p in &plans {
        if has(p, "MigrateSlots") {
            assert!(p.removable.is_empty() || drained);
        }
        if !p.removable.is_empty() {
            drained = true;
        }
    }
    assert_eq!(
        removed(&plans),
        [MemberRef::new(3, 0), MemberRef::new(3, 1)]
            .into_iter()
            .collect()
    );
    assert_topology(&sim, &want);
}

#[test]
fn a_leaving_shards_replica_is_kept_until_the_drain_is_done() {
    let (mut sim, want) = scaled((3, 1), (2, 1));
    let plan = plan_of(&mut sim, &want);
    assert!(plan.removable.is_empty(), "{:?}", plan.removable);
    assert!(kinds(&plan).contains(&"MigrateSlots"));
}

// ---------------------------------------------------------------- settings

#[test]
fn differing_settings_are_set_live_and_member_settings_override() {
    let (mut sim, mut want) = healthy(1, 1);
    want.config
        .insert("maxmemory-policy".into(), "allkeys-lru".into());
    want.shards[0].members[1] = DesiredMember {
        index: MemberIndex::Member(1),
        config: [("availability-zone".to_string(), "zone-b".to_string())]
            .into_iter()
            .collect(),
    };
    let plan = plan_of(&mut sim, &want);
    assert_eq!(
        plan.actions
            .iter()
            .filter(|a| a.kind() == "ConfigSet")
            .count(),
        3
    );
    converge(&mut sim, &want, 5);
    assert_eq!(
        sim.node(MemberRef::new(0, 1))
            .config
            .get("availability-zone")
            .map(String::as_str),
        Some("zone-b")
    );
}

// ---------------------------------------------------------------- input and health

#[test]
fn contradictory_input_is_refused_with_what_is_wrong() {
    let mut want = desired(2, 1);
    want.shards[1].index = ShardIndex(0);
    let observed = ObservedCluster::default();
    assert_eq!(
        next_actions(&want, &observed, &PlannerOptions::default()),
        Err(PlanError::DuplicateShard {
            shard: ShardIndex(0)
        })
    );
    let mut want = desired(1, 1);
    want.shards[0].primary = Some(MemberIndex::Member(5));
    assert!(matches!(
        next_actions(&want, &observed, &PlannerOptions::default()),
        Err(PlanError::UnknownMember { .. })
    ));
    let mut sim = Sim::cluster(1, 1);
    let mut observed = sim.observe();
    let dup = observed.members[0].clone();
    observed.members[1].addr = dup.addr;
    assert!(matches!(
        next_actions(&desired(1, 1), &observed, &PlannerOptions::default()),
        Err(PlanError::SharedAddress { .. })
    ));
}

#[test]
fn health_names_what_is_degraded() {
    let (mut sim, want) = healthy(3, 1);
    sim.kill(MemberRef::new(2, 1));
    let h = health_of(&mut sim, &want);
    assert!(h.is_degraded());
    assert!(h.issues.contains(&HealthIssue::MemberUnreachable {
        member: MemberRef::new(2, 1)
    }));
    assert!(h.issues.iter().any(|i| matches!(i, HealthIssue::ReplicaMissing { member } | HealthIssue::ReplicaNotInSync { member, .. } if *member == MemberRef::new(2, 1))));
    assert_eq!(h.ready_shards, 2);
    sim.kill(MemberRef::new(0, 0));
    let h = health_of(&mut sim, &want);
    assert!(h.issues.iter().any(|i| i.reason() == "SlotsUncovered"));
    assert!(h.issues.contains(&HealthIssue::ShardWithoutPrimary {
        shard: ShardIndex(0)
    }));
}

#[test]
fn health_of_a_fresh_cluster_is_not_ready() {
    let mut sim = Sim::cluster(1, 0);
    let h = health(&desired(1, 0), &sim.observe(), &PlannerOptions::default()).unwrap();
    assert!(!h.is_ready());
    assert_eq!(h.first_reason(), Some("SlotsUncovered"));
}

// ---------------------------------------------------------------- properties

#[derive(Debug, Clone)]
enum Event {
    Shards(u32),
    Replicas(u32),
    KillPrimary(u32),
    RecreateReplica(u32),
    MovePrimary(u32),
    MoveIp(u32, u32),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (1u32..=5).prop_map(Event::Shards),
        (0u32..=2).prop_map(Event::Replicas),
        (0u32..5).prop_map(Event::KillPrimary),
        (0u32..5).prop_map(Event::RecreateReplica),
        (0u32..5).prop_map(Event::MovePrimary),
        ((0u32..5), (0u32..3)).prop_map(|(s, m)| Event::MoveIp(s, m)),
    ]
}

fn desired_with(shards: u32, replicas: u32, primaries: &BTreeMap<u32, u32>) -> DesiredCluster {
    let mut d = desired(shards, replicas);
    for s in &mut d.shards {
        s.primary = primaries
            .get(&s.index.0)
            .copied()
            .filter(|m| *m <= replicas)
            .map(MemberIndex::Member);
    }
    d
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// From a healthy cluster, any sequence of scale changes and faults converges
    /// back to the desired topology without losing data and without breaking a rule.
    #[test]
    fn any_sequence_of_changes_converges_without_loss(
        start in (1u32..=4, 0u32..=2),
        events in prop::collection::vec(event(), 1..6),
    ) {
        let (mut shards, mut replicas) = start;
        let mut sim = Sim::cluster(shards, replicas);
        let mut primaries: BTreeMap<u32, u32> = BTreeMap::new();
        converge(&mut sim, &desired_with(shards, replicas, &primaries), 40);
        sim.write_everything();
        sim.tick();
        for e in events {
            match e {
                Event::Shards(n) => {
                    for s in shards..n {
                        for m in 0..=replicas {
                            sim.add(MemberRef::new(s, m));
                        }
                    }
                    shards = n;
                }
                Event::Replicas(n) => {
                    for s in 0..shards {
                        for m in replicas + 1..=n {
                            if !sim.current.contains_key(&MemberRef::new(s, m)) {
                                sim.add(MemberRef::new(s, m));
                            }
                        }
                    }
                    replicas = n;
                }
                Event::KillPrimary(s) if s < shards && replicas > 0 => {
                    let p = (0..=replicas)
                        .map(|m| MemberRef::new(s, m))
                        .find(|r| sim.current.contains_key(r) && sim.node(*r).primary.is_none() && !sim.node(*r).slots.is_empty());
                    if let Some(p) = p {
                        sim.kill(p);
                        sim.tick();
                        sim.tick();
                        sim.restart(p);
                    }
                }
                Event::RecreateReplica(s) if s < shards && replicas > 0 => {
                    let r = (0..=replicas)
                        .map(|m| MemberRef::new(s, m))
                        .find(|r| sim.current.contains_key(r) && sim.node(*r).primary.is_some());
                    if let Some(r) = r {
                        sim.recreate(r);
                    }
                }
                Event::MovePrimary(s) if s < shards && replicas > 0 => {
                    primaries.insert(s, replicas);
                }
                Event::MoveIp(s, m) if s < shards && m <= replicas
                    && sim.current.contains_key(&MemberRef::new(s, m)) => {
                        sim.move_ip(MemberRef::new(s, m));
                    }
                _ => {}
            }
            let want = desired_with(shards, replicas, &primaries);
            converge(&mut sim, &want, 60);
            assert_topology(&sim, &want);
        }
    }
}

#[test]
fn slot_keys_route_to_the_owner_in_the_view() {
    // A small check that the view helpers agree with the simulator's truth.
    let (mut sim, _) = healthy(3, 0);
    let observed = sim.observe();
    let report = observed.members[0].report().unwrap();
    let slot = Slot::for_key(b"foo");
    let owner = report.nodes.owner_of(slot).unwrap();
    let truth = sim.nodes.iter().find(|n| n.slots.contains(slot)).unwrap();
    assert_eq!(owner.id, truth.id);
    let _ = SlotRange::full();
}

// ---------------------------------------------------------------- epochs

/// A fresh 3x1 bootstrap as the real flake left it: every member but 2/0, and
/// 1/1 itself, say 1/1 is `slave` of 1/0 with epoch 3 (its primary's); 2/0
/// still lists 1/1 as `master` with epoch 4, the epoch 1/1 took when fresh
/// primaries' equal epochs were resolved. `stale` is 2/0's epoch for 1/1;
/// `viewer` is the member with the stale view (4 for 2/0, 0 for the anchor 0/0).
fn stale_role_cluster(stale: u64) -> (DesiredCluster, ObservedCluster) {
    stale_role_seen_by(4, stale)
}

fn stale_role_seen_by(viewer: usize, stale: u64) -> (DesiredCluster, ObservedCluster) {
    let ids: Vec<String> = "abcdef".chars().map(|c| c.to_string().repeat(40)).collect();
    let (a, b, c, d, e, f) = (&ids[0], &ids[1], &ids[2], &ids[3], &ids[4], &ids[5]);
    let addr = |i: u8| format!("10.0.0.{i}:6379@16379");
    // The view every member but 2/0 shares, from the viewer `me` (index into ids).
    let agreed = |me: usize| {
        let lines = [
            format!("{a} {} master - 0 0 1 connected 0-5460", addr(1)),
            format!("{b} {} slave {a} 0 0 1 connected", addr(2)),
            format!("{c} {} master - 0 0 3 connected 5461-10922", addr(3)),
            format!("{d} {} slave {c} 0 0 3 connected", addr(4)),
            format!("{e} {} master - 0 0 2 connected 10923-16383", addr(5)),
            format!("{f} {} slave {e} 0 0 2 connected", addr(6)),
        ];
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if i == me {
                    l.replacen(" master", " myself,master", 1).replacen(
                        " slave",
                        " myself,slave",
                        1,
                    )
                } else {
                    l.clone()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let stale_view = agreed(viewer).replace(
        &format!("{d} {} slave {c} 0 0 3 connected", addr(4)),
        &format!("{d} {} master - 0 0 {stale} connected", addr(4)),
    );
    let mut members = Vec::new();
    for i in 0..6u8 {
        let member = MemberRef::new(u32::from(i / 2), u32::from(i % 2));
        let text = if usize::from(i) == viewer {
            stale_view.clone()
        } else {
            agreed(usize::from(i))
        };
        let replication = if i % 2 == 0 {
            "role:master\nmaster_repl_offset:100\nconnected_slaves:1\n".to_string()
        } else {
            format!(
                "role:slave\nmaster_host:10.0.0.{}\nmaster_port:6379\nmaster_link_status:up\n\
                 master_sync_in_progress:0\nslave_repl_offset:100\nmaster_repl_offset:100\n",
                i
            )
        };
        let report = NodeReport {
            nodes: ClusterNodes::parse(&text).unwrap(),
            replication: ReplicationInfo::parse(&replication).unwrap(),
            slot_migrations: vec![],
            keys: 0,
            config: BTreeMap::new(),
            cluster_state_ok: true,
            version: None,
            modules: Vec::new(),
        };
        members.push(ObservedMember {
            member,
            addr: Some(MemberAddr {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, i + 1)),
                port: 6379,
                bus_port: 16379,
            }),
            known_node_id: None,
            former_node_ids: Vec::new(),
            state: MemberState::Reachable(Box::new(report)),
        });
    }
    (desired(3, 1), ObservedCluster { members })
}

#[test]
fn a_member_stuck_on_a_replicas_old_higher_epoch_gets_its_primary_epoch_bumped() {
    let (want, observed) = stale_role_cluster(4);
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert_eq!(
        plan.actions,
        vec![Action::BumpEpoch {
            on: MemberRef::new(1, 0)
        }],
        "{plan:#?}"
    );
    assert!(
        plan.waiting.contains(&Wait::WaitingForViewsToAgree {
            members: vec![MemberRef::new(2, 0)]
        }),
        "{plan:#?}"
    );
    assert_eq!(
        plan.actions[0].to_string(),
        "CLUSTER BUMPEPOCH on shard 1 member 0"
    );
}

#[test]
fn a_role_change_still_spreading_with_no_higher_epoch_is_only_waited_for() {
    // The same disagreement, but 2/0's epoch for 1/1 is not above 1/0's: the
    // news passes Valkey's guard at the next ping, nothing to bump.
    let (want, observed) = stale_role_cluster(3);
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert!(
        plan.waiting.contains(&Wait::WaitingForViewsToAgree {
            members: vec![MemberRef::new(2, 0)]
        }),
        "{plan:#?}"
    );
}

#[test]
fn a_stale_view_on_the_anchor_itself_gets_the_primary_epoch_bumped_too() {
    // 0/0 is the anchor (all views alike but one, lowest member first): every
    // other member now differs from it, and the bump must still go to 1/0.
    let (want, observed) = stale_role_seen_by(0, 4);
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert_eq!(
        plan.actions,
        vec![Action::BumpEpoch {
            on: MemberRef::new(1, 0)
        }],
        "{plan:#?}"
    );
}

#[test]
fn no_bump_for_a_primary_the_anchor_sees_failed() {
    // The same stale view, but the anchor (0/0) marks 1/0 failed: a bumped epoch
    // would make a primary the cluster may be replacing win, so nothing is sent.
    let (want, mut observed) = stale_role_cluster(4);
    let c: NodeId = "c".repeat(40).parse().unwrap();
    let MemberState::Reachable(anchor) = &mut observed.members[0].state else {
        panic!("the anchor is reachable");
    };
    let mut nodes = anchor.nodes.nodes().to_vec();
    for n in &mut nodes {
        if n.id == c {
            n.flags.fail = true;
        }
    }
    anchor.nodes = ClusterNodes::from_nodes(nodes).unwrap();
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert!(
        !plan.actions.iter().any(|a| a.kind() == "BumpEpoch"),
        "{plan:#?}"
    );
}

/// After a TAKEOVER on 0/1: the old primary O of shard 0 came back as a new
/// empty node N (its nodes.conf lost) and the status already records N, so O
/// is only in 0/0's former ids. 0/1 claims 0-8191 itself, but shard 1's
/// members recorded for O the same epoch 0/1 carries, so they keep O as the
/// owner and the views never agree.
fn takeover_not_taken(former: Vec<NodeId>) -> (DesiredCluster, ObservedCluster) {
    let (o, n, b, c, d) = (
        "0".repeat(39) + "a",
        "0".repeat(39) + "e",
        "0".repeat(39) + "b",
        "0".repeat(39) + "c",
        "0".repeat(39) + "d",
    );
    let addr = |i: u8| format!("10.0.0.{i}:6379@16379");
    let shard1 = format!(
        "{c} {} master - 0 0 2 connected 8192-16383\n{d} {} slave {c} 0 0 2 connected",
        addr(3),
        addr(4)
    );
    let views = [
        format!(
            "{n} {} myself,master - 0 0 0 connected\n{b} {} master - 0 0 3 connected",
            addr(1),
            addr(2)
        ),
        format!(
            "{b} {} myself,master - 0 0 3 connected 0-8191\n{o} :0@0 master,fail,noaddr - 0 0 3 disconnected\n{n} {} master - 0 0 0 connected\n{shard1}",
            addr(2),
            addr(1)
        ),
        format!(
            "{o} :0@0 master,fail,noaddr - 0 0 3 disconnected 0-8191\n{b} {} master - 0 0 3 connected\n{}",
            addr(2),
            shard1.replacen(" master", " myself,master", 1)
        ),
        format!(
            "{o} :0@0 master,fail,noaddr - 0 0 3 disconnected 0-8191\n{b} {} master - 0 0 3 connected\n{}",
            addr(2),
            shard1.replacen(" slave", " myself,slave", 1)
        ),
    ];
    let mut members = Vec::new();
    for (i, text) in views.iter().enumerate() {
        let member = MemberRef::new(u32::from(i as u8 / 2), u32::from(i as u8 % 2));
        let replication = if i == 3 {
            "role:slave\nmaster_host:10.0.0.3\nmaster_port:6379\nmaster_link_status:up\n\
             master_sync_in_progress:0\nslave_repl_offset:100\nmaster_repl_offset:100\n"
        } else {
            "role:master\nmaster_repl_offset:100\nconnected_slaves:0\n"
        };
        let report = NodeReport {
            nodes: ClusterNodes::parse(text).unwrap(),
            replication: ReplicationInfo::parse(replication).unwrap(),
            slot_migrations: vec![],
            keys: 0,
            config: BTreeMap::new(),
            cluster_state_ok: i == 1,
            version: None,
            modules: Vec::new(),
        };
        members.push(ObservedMember {
            member,
            addr: Some(MemberAddr {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1)),
                port: 6379,
                bus_port: 16379,
            }),
            known_node_id: Some(report.node_id().clone()),
            former_node_ids: if i == 0 { former.clone() } else { Vec::new() },
            state: MemberState::Reachable(Box::new(report)),
        });
    }
    (desired(2, 1), ObservedCluster { members })
}

#[test]
fn a_replaced_primary_whose_slots_a_member_claims_is_forgotten_though_views_differ() {
    let o: NodeId = ("0".repeat(39) + "a").parse().unwrap();
    let (want, observed) = takeover_not_taken(vec![o.clone()]);
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    let forgets: Vec<MemberRef> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Forget { on, node_id } if *node_id == o => Some(*on),
            _ => None,
        })
        .collect();
    assert_eq!(
        forgets,
        vec![
            MemberRef::new(0, 1),
            MemberRef::new(1, 0),
            MemberRef::new(1, 1)
        ],
        "{plan:#?}"
    );
}

#[test]
fn an_unknown_node_serving_slots_stays_blocked_though_a_member_claims_them() {
    // The same views, but nothing says O was ever a member's: it may be a
    // node someone else met into the cluster, and it is left alone.
    let (want, observed) = takeover_not_taken(Vec::new());
    let plan = next_actions(&want, &observed, &PlannerOptions::default()).unwrap();
    assert!(
        !plan.actions.iter().any(|a| a.kind() == "Forget"),
        "{plan:#?}"
    );
    assert!(
        plan.waiting
            .iter()
            .any(|w| matches!(w, Wait::OrphanOwnsSlots { .. })),
        "{plan:#?}"
    );
}

// ---------------------------------------------------------------- restore

/// A fresh `shards` x `replicas` cluster whose first members started from a
/// backup with the shard ranges `held`: each holds keys in the first half of
/// its range and, as Valkey does on start, serves the slots of its keys.
fn restoring(replicas: u32, held: &[(u64, u64)]) -> (Sim, DesiredCluster) {
    let shards = held.len() as u32;
    let mut sim = Sim::cluster(shards, replicas);
    sim.restoring = true;
    let mut want = desired(shards, replicas);
    let mut map = BTreeMap::new();
    for (s, (start, end)) in held.iter().enumerate() {
        let range = SlotSet::from_range(SlotRange::from_numbers(*start, *end).unwrap());
        let keys = SlotSet::from_range(
            SlotRange::from_numbers(*start, start + (end - start) / 2).unwrap(),
        );
        let i = sim.idx(MemberRef::new(s as u32, 0));
        sim.nodes[i].slots = keys.clone();
        sim.nodes[i].holds = keys.clone();
        sim.written = sim.written.union(&keys);
        map.insert(ShardIndex(s as u32), range);
    }
    want.restore = Some(map);
    (sim, want)
}

#[test]
fn a_restore_joins_the_first_members_and_gives_each_shard_the_slots_of_its_backup() {
    // Deliberately uneven: a plain bootstrap would split 16384 evenly.
    let held = [(0, 999), (1000, 9999), (10000, 16383)];
    let (mut sim, want) = restoring(1, &held);
    let plans = converge(&mut sim, &want, 30);
    for (s, (start, end)) in held.iter().enumerate() {
        let first = MemberRef::new(s as u32, 0);
        let range = SlotSet::from_range(SlotRange::from_numbers(*start, *end).unwrap());
        assert_eq!(sim.node(first).slots, range, "shard {s}");
        assert_follows(&sim, MemberRef::new(s as u32, 1), first);
    }
    let kinds: Vec<&str> = all_actions(&plans).map(Action::kind).collect();
    assert!(!kinds.contains(&"MigrateSlots"), "{kinds:?}");
    assert!(!kinds.contains(&"ResetNode"), "{kinds:?}");
}

#[test]
fn a_restore_adds_no_slot_and_attaches_no_replica_until_every_member_joined() {
    let (mut sim, want) = restoring(1, &[(0, 8191), (8192, 16383)]);
    // Shard 1's first member is not up yet.
    let i = sim.idx(MemberRef::new(1, 0));
    sim.nodes[i].alive = false;
    for _ in 0..4 {
        let plan = plan_of(&mut sim, &want);
        assert!(!has(&plan, "AddSlotsRange"), "{:?}", plan.actions);
        assert!(!has(&plan, "Replicate"), "{:?}", plan.actions);
        step(&mut sim, &plan);
    }
}

#[test]
fn a_member_serving_slots_outside_its_shards_backup_is_not_met_as_restored() {
    let (mut sim, mut want) = restoring(0, &[(0, 8191), (8192, 16383)]);
    // The manifest says shard 1 held other slots than its member serves.
    if let Some(map) = want.restore.as_mut() {
        map.insert(
            ShardIndex(1),
            SlotSet::from_range(SlotRange::from_numbers(16000, 16383).unwrap()),
        );
    }
    let m = MemberRef::new(1, 0);
    for _ in 0..3 {
        let plan = plan_of(&mut sim, &want);
        assert!(plan.waiting.contains(&Wait::SeparateCluster { member: m }));
        assert!(!has(&plan, "AddSlotsRange"));
        step(&mut sim, &plan);
    }
}
