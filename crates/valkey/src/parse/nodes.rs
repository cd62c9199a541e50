// Over 600 lines: 361 lines of code; the rest are its unit tests, kept beside it.
//! CLUSTER NODES: one line per node the answering node knows,
//! `id ip:port@cport[,hostname[,aux=value...]] flags primary-id|- ping-sent pong-recv
//! config-epoch link-state slot...`.

use super::{NodeId, ParseError, Role};
use crate::slots::{Slot, SlotRange, SlotSet};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Where a node says it can be reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeAddress {
    /// `None` when the node has no address yet (`:0@0` with `noaddr`, or a lone node
    /// that has not learnt its own address).
    pub ip: Option<IpAddr>,
    pub port: u16,
    pub bus_port: u16,
    /// The announced hostname, when one is set.
    pub hostname: Option<String>,
    /// Extra `key=value` fields newer servers append (e.g. `shard-id`).
    pub aux: BTreeMap<String, String>,
}

/// The flags field of a CLUSTER NODES line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeFlags {
    pub myself: bool,
    pub primary: bool,
    pub replica: bool,
    /// `fail?`: this node suspects the node is down.
    pub pfail: bool,
    /// `fail`: a majority of primaries agreed the node is down.
    pub fail: bool,
    /// `handshake`: not yet a trusted member; its id is provisional.
    pub handshake: bool,
    pub noaddr: bool,
    pub nofailover: bool,
    /// Flags this parser does not know, kept as written.
    pub other: Vec<String>,
}

impl NodeFlags {
    fn parse(field: &str) -> NodeFlags {
        let mut flags = NodeFlags::default();
        for flag in field.split(',') {
            match flag {
                "myself" => flags.myself = true,
                "master" => flags.primary = true,
                "slave" => flags.replica = true,
                "fail?" => flags.pfail = true,
                "fail" => flags.fail = true,
                "handshake" => flags.handshake = true,
                "noaddr" => flags.noaddr = true,
                "nofailover" => flags.nofailover = true,
                "noflags" | "" => {}
                other => flags.other.push(other.to_string()),
            }
        }
        flags
    }
}

/// The cluster bus link state of the answering node to this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LinkState {
    Connected,
    Disconnected,
}

/// A legacy (SETSLOT) migration marker on a slot: `[slot->-id]` or `[slot-<-id]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum SlotMarker {
    /// This node is migrating `slot` to `to`.
    Migrating { slot: Slot, to: NodeId },
    /// This node is importing `slot` from `from`.
    Importing { slot: Slot, from: NodeId },
}

/// One line of CLUSTER NODES.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterNode {
    pub id: NodeId,
    pub address: NodeAddress,
    pub flags: NodeFlags,
    /// For a replica, the id of its primary.
    pub primary_id: Option<NodeId>,
    pub ping_sent_ms: u64,
    pub pong_received_ms: u64,
    pub config_epoch: u64,
    pub link: LinkState,
    pub slots: SlotSet,
    pub markers: Vec<SlotMarker>,
}

impl ClusterNode {
    /// The role the flags give, `None` for a node in handshake (no role yet).
    pub fn role(&self) -> Option<Role> {
        if self.flags.primary {
            Some(Role::Primary)
        } else if self.flags.replica {
            Some(Role::Replica)
        } else {
            None
        }
    }

    /// Whether the answering node considers this node failed or possibly failed.
    pub fn is_failing(&self) -> bool {
        self.flags.fail || self.flags.pfail
    }

    /// Whether `ip:port` is where this node is announced.
    pub fn is_at(&self, ip: IpAddr, port: u16) -> bool {
        !self.flags.noaddr && self.address.ip == Some(ip) && self.address.port == port
    }

    /// Parses one CLUSTER NODES line.
    pub fn parse(line: &str) -> Result<ClusterNode, ParseError> {
        let err = |field: &'static str, reason: String| ParseError::ClusterNodesLine {
            line: line.to_string(),
            field,
            reason,
        };
        let mut fields = line.split_ascii_whitespace();
        let mut next = |field: &'static str| {
            fields
                .next()
                .ok_or_else(|| err(field, "missing".to_string()))
        };
        let id: NodeId = next("id")?
            .parse()
            .map_err(|e: ParseError| err("id", e.to_string()))?;
        let address = parse_address(next("address")?).map_err(|r| err("address", r))?;
        let flags = NodeFlags::parse(next("flags")?);
        let primary_id = match next("primary")? {
            "-" => None,
            text => Some(
                text.parse::<NodeId>()
                    .map_err(|e| err("primary", e.to_string()))?,
            ),
        };
        let number = |field: &'static str, text: &str| {
            text.parse::<u64>()
                .map_err(|_| err(field, format!("{text:?} is not a number")))
        };
        let ping_sent_ms = number("ping-sent", next("ping-sent")?)?;
        let pong_received_ms = number("pong-recv", next("pong-recv")?)?;
        let config_epoch = number("config-epoch", next("config-epoch")?)?;
        let link = match next("link-state")? {
            "connected" => LinkState::Connected,
            "disconnected" => LinkState::Disconnected,
            other => return Err(err("link-state", format!("unknown state {other:?}"))),
        };
        let mut ranges = Vec::new();
        let mut markers = Vec::new();
        for token in fields {
            if let Some(inner) = token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                markers.push(parse_marker(inner).map_err(|r| err("slots", r))?);
            } else {
                ranges.push(
                    token
                        .parse::<SlotRange>()
                        .map_err(|e| err("slots", e.to_string()))?,
                );
            }
        }
        Ok(ClusterNode {
            id,
            address,
            flags,
            primary_id,
            ping_sent_ms,
            pong_received_ms,
            config_epoch,
            link,
            slots: SlotSet::from_ranges(ranges),
            markers,
        })
    }
}

/// `ip:port@cport[,hostname[,key=value...]]`; the ip may be empty or IPv6 (split at
/// the last colon; brackets are accepted).
fn parse_address(text: &str) -> Result<NodeAddress, String> {
    let mut parts = text.split(',');
    let main = parts.next().unwrap_or_default();
    let mut hostname = None;
    let mut aux = BTreeMap::new();
    for (i, part) in parts.enumerate() {
        match part.split_once('=') {
            Some((key, value)) => {
                aux.insert(key.to_string(), value.to_string());
            }
            None if i == 0 => {
                if !part.is_empty() {
                    hostname = Some(part.to_string());
                }
            }
            None => return Err(format!("unexpected part {part:?}")),
        }
    }
    let (ip_port, bus) = main
        .split_once('@')
        .ok_or_else(|| format!("{main:?} has no @bus-port"))?;
    let bus_port = bus
        .parse::<u16>()
        .map_err(|_| format!("bus port {bus:?} is not a port"))?;
    let (ip, port) = ip_port
        .rsplit_once(':')
        .ok_or_else(|| format!("{ip_port:?} has no :port"))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("port {port:?} is not a port"))?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    let ip = if ip.is_empty() {
        None
    } else {
        Some(
            ip.parse::<IpAddr>()
                .map_err(|_| format!("{ip:?} is not an IP address"))?,
        )
    };
    Ok(NodeAddress {
        ip,
        port,
        bus_port,
        hostname,
        aux,
    })
}

/// `slot->-id` or `slot-<-id`.
fn parse_marker(inner: &str) -> Result<SlotMarker, String> {
    let (slot, id, migrating) = if let Some((slot, id)) = inner.split_once("->-") {
        (slot, id, true)
    } else if let Some((slot, id)) = inner.split_once("-<-") {
        (slot, id, false)
    } else {
        return Err(format!("unknown slot marker [{inner}]"));
    };
    let slot: Slot = slot
        .parse()
        .map_err(|e: crate::slots::SlotError| e.to_string())?;
    let id: NodeId = id.parse().map_err(|e: ParseError| e.to_string())?;
    Ok(if migrating {
        SlotMarker::Migrating { slot, to: id }
    } else {
        SlotMarker::Importing { slot, from: id }
    })
}

/// A whole CLUSTER NODES reply: what one node knows of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterNodes {
    nodes: Vec<ClusterNode>,
    myself: usize,
}

/// The most lines a CLUSTER NODES reply may have: twice the most members a
/// cluster may have (1000), for nodes that are leaving, forgotten or in a
/// handshake. A reply of more is no cluster the operator made (a tenant's
/// image may answer anything), and the view of every member is kept for a
/// whole reconcile, so it is refused rather than held.
pub const MAX_NODES: usize = 2000;

impl ClusterNodes {
    /// Parses a reply; it must have exactly one `myself` line and at most
    /// [`MAX_NODES`] lines.
    pub fn parse(text: &str) -> Result<ClusterNodes, ParseError> {
        let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let mut nodes = Vec::new();
        for line in lines {
            if nodes.len() == MAX_NODES {
                return Err(ParseError::ClusterNodes {
                    reason: format!("more than {MAX_NODES} nodes listed"),
                });
            }
            nodes.push(ClusterNode::parse(line)?);
        }
        ClusterNodes::from_nodes(nodes)
    }

    /// Builds a view from parsed lines; exactly one must carry `myself`.
    pub fn from_nodes(nodes: Vec<ClusterNode>) -> Result<ClusterNodes, ParseError> {
        let mut mine = nodes.iter().enumerate().filter(|(_, n)| n.flags.myself);
        let myself = match (mine.next(), mine.next()) {
            (Some((i, _)), None) => i,
            (None, _) => {
                return Err(ParseError::ClusterNodes {
                    reason: "no line has the myself flag".to_string(),
                });
            }
            (Some(_), Some(_)) => {
                return Err(ParseError::ClusterNodes {
                    reason: "more than one line has the myself flag".to_string(),
                });
            }
        };
        Ok(ClusterNodes { nodes, myself })
    }

    /// The answering node's own line.
    pub fn myself(&self) -> &ClusterNode {
        &self.nodes[self.myself]
    }

    /// Every line, in reply order.
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// Gives the lines `f` picks another IP and client port (the bus port
    /// and the rest stay): how a caller that knows which addresses nodes
    /// announce to clients sees them at their own addresses again.
    pub fn readdress(&mut self, mut f: impl FnMut(&ClusterNode) -> Option<(IpAddr, u16)>) {
        for node in &mut self.nodes {
            if let Some((ip, port)) = f(node) {
                node.address.ip = Some(ip);
                node.address.port = port;
            }
        }
    }

    /// The line of node `id` (ignoring handshake entries, whose ids are provisional).
    pub fn get(&self, id: &NodeId) -> Option<&ClusterNode> {
        self.nodes
            .iter()
            .find(|n| &n.id == id && !n.flags.handshake)
    }

    /// Entries still in handshake.
    pub fn handshakes(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|n| n.flags.handshake)
    }

    /// Whether this view knows no other node and no slot is assigned: a fresh node.
    pub fn is_fresh(&self) -> bool {
        self.nodes.len() == 1 && self.myself().slots.is_empty()
    }

    /// Slot ownership in this view: every non-handshake node that serves slots.
    pub fn slot_owners(&self) -> BTreeMap<NodeId, SlotSet> {
        self.nodes
            .iter()
            .filter(|n| !n.flags.handshake && !n.slots.is_empty())
            .map(|n| (n.id.clone(), n.slots.clone()))
            .collect()
    }

    /// Every slot some node of this view serves.
    pub fn covered_slots(&self) -> SlotSet {
        self.nodes
            .iter()
            .filter(|n| !n.flags.handshake)
            .fold(SlotSet::new(), |acc, n| acc.union(&n.slots))
    }

    /// The node serving `slot`, if any.
    pub fn owner_of(&self, slot: Slot) -> Option<&ClusterNode> {
        self.nodes
            .iter()
            .find(|n| !n.flags.handshake && n.slots.contains(slot))
    }

    /// The nodes replicating `primary`.
    pub fn replicas_of<'a>(&'a self, primary: &'a NodeId) -> impl Iterator<Item = &'a ClusterNode> {
        self.nodes
            .iter()
            .filter(move |n| n.flags.replica && n.primary_id.as_ref() == Some(primary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: &str = "\
637fce090371c0361bde13cb323f1c70708f3b88 127.0.0.1:7102@7202 master - 0 1796229531138 5 connected 3011-3020 8192-16383
7f1b152befcb7e611e2e363dc1871561401e9ccd 127.0.0.1:7103@7203 master,fail - 1796229546012 1796229545008 7 disconnected
c1c15d512c42d114ec7d1752ff4fb59311542412 127.0.0.1:7101@7201 myself,master - 0 0 0 connected 0-3010 3021-8191
40085775a61ee79edfdab5784db37979187432cd 127.0.0.1:7104@7204 slave 637fce090371c0361bde13cb323f1c70708f3b88 0 1796229530836 4 connected
0ca067a48fda5cc95b4fd35cf1939f220427740b 127.0.0.1:7105@7205 handshake - 0 0 0 disconnected
";

    #[test]
    fn a_full_view_parses_into_typed_nodes() {
        let view = ClusterNodes::parse(VIEW).unwrap();
        assert_eq!(view.nodes().len(), 5);
        let me = view.myself();
        assert_eq!(me.id.as_str(), "c1c15d512c42d114ec7d1752ff4fb59311542412");
        assert_eq!(me.address.ip, Some("127.0.0.1".parse().unwrap()));
        assert_eq!((me.address.port, me.address.bus_port), (7101, 7201));
        assert_eq!(me.role(), Some(Role::Primary));
        assert_eq!(me.slots.len(), 8192 - 10);
        let failed = &view.nodes()[1];
        assert!(failed.flags.fail && failed.is_failing());
        assert_eq!(failed.link, LinkState::Disconnected);
        assert_eq!(failed.ping_sent_ms, 1796229546012);
        let replica = &view.nodes()[3];
        assert_eq!(replica.role(), Some(Role::Replica));
        assert_eq!(replica.primary_id, Some(view.nodes()[0].id.clone()));
        assert_eq!(view.replicas_of(&view.nodes()[0].id).count(), 1);
        assert_eq!(view.handshakes().count(), 1);
        assert_eq!(view.nodes()[4].role(), None);
        assert!(view.covered_slots().is_full());
        assert_eq!(
            view.owner_of(Slot::new(3015).unwrap())
                .unwrap()
                .address
                .port,
            7102
        );
    }

    #[test]
    fn handshake_entries_are_not_found_by_id() {
        let view = ClusterNodes::parse(VIEW).unwrap();
        let provisional: NodeId = "0ca067a48fda5cc95b4fd35cf1939f220427740b".parse().unwrap();
        assert!(view.get(&provisional).is_none());
    }

    #[test]
    fn noaddr_and_hostname_and_aux_fields_parse() {
        let line = "7f1b152befcb7e611e2e363dc1871561401e9ccd :0@0,host-1,shard-id=abc,tls-port=0 master,fail,noaddr - 1 2 3 disconnected";
        let node = ClusterNode::parse(line).unwrap();
        assert_eq!(node.address.ip, None);
        assert_eq!(node.address.hostname.as_deref(), Some("host-1"));
        assert_eq!(
            node.address.aux.get("shard-id").map(String::as_str),
            Some("abc")
        );
        assert!(node.flags.noaddr && node.flags.fail && node.flags.primary);
        assert!(!node.is_at("127.0.0.1".parse().unwrap(), 0));
    }

    #[test]
    fn ipv6_addresses_split_at_the_last_colon() {
        let line = "7f1b152befcb7e611e2e363dc1871561401e9ccd fd00::1:2:6379@16379 myself,master - 0 0 1 connected";
        let node = ClusterNode::parse(line).unwrap();
        assert_eq!(node.address.ip, Some("fd00::1:2".parse().unwrap()));
        assert_eq!(node.address.port, 6379);
    }

    #[test]
    fn single_slots_and_migration_markers_parse() {
        let line = "7f1b152befcb7e611e2e363dc1871561401e9ccd 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 5 7 10-20 [93->-c1c15d512c42d114ec7d1752ff4fb59311542412] [77-<-637fce090371c0361bde13cb323f1c70708f3b88]";
        let node = ClusterNode::parse(line).unwrap();
        assert_eq!(node.slots.to_string(), "5 7 10-20");
        assert_eq!(node.markers.len(), 2);
        assert!(matches!(&node.markers[0], SlotMarker::Migrating { slot, .. } if slot.get() == 93));
        assert!(matches!(&node.markers[1], SlotMarker::Importing { slot, .. } if slot.get() == 77));
    }

    #[test]
    fn unknown_flags_are_kept_not_refused() {
        let line = "7f1b152befcb7e611e2e363dc1871561401e9ccd 10.0.0.1:6379@16379 myself,master,shiny - 0 0 1 connected";
        let node = ClusterNode::parse(line).unwrap();
        assert_eq!(node.flags.other, vec!["shiny".to_string()]);
    }

    #[test]
    fn bad_fields_are_named_in_the_error() {
        let cases = [
            ("nothex 1.2.3.4:1@2 master - 0 0 0 connected", "id"),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1 master - 0 0 0 connected",
                "address",
            ),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:x@2 master - 0 0 0 connected",
                "address",
            ),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1@2 master - zero 0 0 connected",
                "ping-sent",
            ),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1@2 master - 0 0 0 maybe",
                "link-state",
            ),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1@2 master - 0 0 0 connected 16384",
                "slots",
            ),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1@2 master - 0 0 0 connected [5-?-x]",
                "slots",
            ),
            (
                "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1@2 master",
                "primary",
            ),
        ];
        for (line, field) in cases {
            match ClusterNode::parse(line) {
                Err(ParseError::ClusterNodesLine {
                    field: f, line: l, ..
                }) => {
                    assert_eq!(f, field, "{line}");
                    assert_eq!(l, line);
                }
                other => panic!("{line}: expected an error on {field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_reply_needs_exactly_one_myself_line() {
        let no_me = "7f1b152befcb7e611e2e363dc1871561401e9ccd 1.2.3.4:1@2 master - 0 0 0 connected";
        assert!(matches!(
            ClusterNodes::parse(no_me),
            Err(ParseError::ClusterNodes { .. })
        ));
    }

    #[test]
    fn a_reply_of_more_nodes_than_a_cluster_can_have_is_refused() {
        let line = |i: usize| {
            let flags = if i == 0 { "myself,master" } else { "master" };
            format!("{i:040x} 10.0.0.1:6379@16379 {flags} - 0 0 0 connected\n")
        };
        let most: String = (0..MAX_NODES).map(line).collect();
        assert_eq!(ClusterNodes::parse(&most).unwrap().nodes().len(), MAX_NODES);
        let more: String = (0..=MAX_NODES).map(line).collect();
        match ClusterNodes::parse(&more) {
            Err(ParseError::ClusterNodes { reason }) => {
                assert_eq!(reason, format!("more than {MAX_NODES} nodes listed"));
            }
            other => panic!("expected the reply refused, got {other:?}"),
        }
    }

    use proptest::prelude::*;

    /// Writes a node the way CLUSTER NODES does.
    fn render(n: &ClusterNode) -> String {
        let ip = match n.address.ip {
            Some(ip) => ip.to_string(),
            None => String::new(),
        };
        let mut addr = format!("{ip}:{}@{}", n.address.port, n.address.bus_port);
        if let Some(h) = &n.address.hostname {
            addr.push(',');
            addr.push_str(h);
        }
        let f = &n.flags;
        let mut flags: Vec<&str> = Vec::new();
        for (on, name) in [
            (f.myself, "myself"),
            (f.primary, "master"),
            (f.replica, "slave"),
            (f.pfail, "fail?"),
            (f.fail, "fail"),
            (f.handshake, "handshake"),
            (f.noaddr, "noaddr"),
            (f.nofailover, "nofailover"),
        ] {
            if on {
                flags.push(name);
            }
        }
        let flags = if flags.is_empty() {
            "noflags".to_string()
        } else {
            flags.join(",")
        };
        let primary = n
            .primary_id
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        let link = match n.link {
            LinkState::Connected => "connected",
            LinkState::Disconnected => "disconnected",
        };
        let mut line = format!(
            "{} {addr} {flags} {primary} {} {} {} {link}",
            n.id, n.ping_sent_ms, n.pong_received_ms, n.config_epoch
        );
        if !n.slots.is_empty() {
            line.push(' ');
            line.push_str(&n.slots.to_string());
        }
        line
    }

    fn node_id() -> impl Strategy<Value = NodeId> {
        "[0-9a-f]{40}".prop_map(|s| s.parse().unwrap())
    }

    fn cluster_node() -> impl Strategy<Value = ClusterNode> {
        (
            node_id(),
            prop::option::of(any::<std::net::IpAddr>()),
            any::<u16>(),
            any::<u16>(),
            prop::option::of("[a-z][a-z0-9.-]{0,20}"),
            prop::collection::vec(any::<bool>(), 8),
            prop::option::of(node_id()),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()),
            prop::collection::vec((0u64..16384, 0u64..300), 0..6),
        )
            .prop_map(
                |(id, ip, port, bus, host, f, primary, (ping, pong, epoch, up), ranges)| {
                    ClusterNode {
                        id,
                        address: NodeAddress {
                            ip,
                            port,
                            bus_port: bus,
                            hostname: host,
                            aux: BTreeMap::new(),
                        },
                        flags: NodeFlags {
                            myself: f[0],
                            primary: f[1],
                            replica: f[2],
                            pfail: f[3],
                            fail: f[4],
                            handshake: f[5],
                            noaddr: f[6],
                            nofailover: f[7],
                            other: Vec::new(),
                        },
                        primary_id: primary,
                        ping_sent_ms: ping,
                        pong_received_ms: pong,
                        config_epoch: epoch,
                        link: if up {
                            LinkState::Connected
                        } else {
                            LinkState::Disconnected
                        },
                        slots: SlotSet::from_ranges(
                            ranges.into_iter().map(|(s, l)| {
                                SlotRange::from_numbers(s, (s + l).min(16383)).unwrap()
                            }),
                        ),
                        markers: Vec::new(),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn every_line_cluster_nodes_can_print_parses_back_to_the_same_node(node in cluster_node()) {
            let line = render(&node);
            prop_assert_eq!(ClusterNode::parse(&line).unwrap(), node);
        }

        #[test]
        fn arbitrary_text_never_panics_the_parsers(text in "\\PC{0,200}") {
            let _ = ClusterNodes::parse(&text);
            let _ = ClusterNode::parse(&text);
            let _ = crate::parse::ReplicationInfo::parse(&text);
            let _ = crate::parse::Info::parse(&text);
        }

        #[test]
        fn near_miss_lines_are_errors_not_panics(
            node in cluster_node(),
            cut in 0usize..200,
            junk in "[ :@,\\[\\]<>0-9a-z-]{0,8}",
        ) {
            let line = render(&node);
            let cut = cut.min(line.len());
            let mangled = format!("{}{junk}{}", &line[..cut], &line[cut..]);
            let _ = ClusterNode::parse(&mangled);
        }
    }

    #[test]
    fn a_lone_node_without_slots_is_fresh() {
        let view = ClusterNodes::parse(
            "c198c51fba416db5fdc11e7c35b783dac0201936 :7301@7401,foo.example myself,master - 0 0 0 connected\n",
        )
        .unwrap();
        assert!(view.is_fresh());
        assert_eq!(view.myself().address.ip, None);
    }
}
