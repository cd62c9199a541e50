//! CLUSTER INFO: the node's own view of the cluster (`field:value` lines, the
//! INFO format), typed for what monitoring reads: the state, the slot counts
//! and how many nodes it knows.

use super::{Info, ParseError};
use serde::Serialize;

/// CLUSTER INFO, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClusterInfo {
    /// `cluster_state:ok`: the node serves queries (every slot is served by a
    /// reachable primary, as far as it can tell). `fail` refuses them.
    pub state_ok: bool,
    /// `cluster_slots_assigned`: slots bound to some node (16384 when whole).
    pub slots_assigned: u32,
    /// `cluster_slots_ok`: slots whose node is neither PFAIL nor FAIL.
    pub slots_ok: u32,
    /// `cluster_slots_pfail`: slots whose node this node cannot reach.
    pub slots_pfail: u32,
    /// `cluster_slots_fail`: slots whose node the cluster agrees is down.
    pub slots_fail: u32,
    /// `cluster_known_nodes`: nodes in its table, handshaking ones included.
    pub known_nodes: u32,
    /// `cluster_size`: primaries serving at least one slot.
    pub size: u32,
    /// `cluster_current_epoch`.
    pub current_epoch: u64,
}

impl ClusterInfo {
    /// Parses the text of CLUSTER INFO.
    pub fn parse(text: &str) -> Result<ClusterInfo, ParseError> {
        ClusterInfo::from_info(&Info::parse(text))
    }

    /// Reads the fields of a parsed CLUSTER INFO reply. Every field named
    /// here is required: Valkey has printed all of them since cluster mode
    /// exists, so a missing one means the reply is not CLUSTER INFO.
    pub fn from_info(info: &Info) -> Result<ClusterInfo, ParseError> {
        let section = "cluster info";
        let state = info
            .get("cluster_state")
            .ok_or(ParseError::MissingInfoField {
                section,
                field: "cluster_state",
            })?;
        let state_ok = match state {
            "ok" => true,
            "fail" => false,
            other => {
                return Err(ParseError::InfoField {
                    field: "cluster_state".into(),
                    value: other.into(),
                    reason: "neither ok nor fail".into(),
                });
            }
        };
        Ok(ClusterInfo {
            state_ok,
            slots_assigned: info.required(section, "cluster_slots_assigned")?,
            slots_ok: info.required(section, "cluster_slots_ok")?,
            slots_pfail: info.required(section, "cluster_slots_pfail")?,
            slots_fail: info.required(section, "cluster_slots_fail")?,
            known_nodes: info.required(section, "cluster_known_nodes")?,
            size: info.required(section, "cluster_size")?,
            current_epoch: info.required(section, "cluster_current_epoch")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CLUSTER INFO of a member of a healthy 3x1 cluster, as valkey-server
    /// 9.1.2 sent it.
    const HEALTHY: &str = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_nodes_pfail:0\r\ncluster_nodes_fail:0\r\ncluster_voting_nodes_pfail:0\r\ncluster_voting_nodes_fail:0\r\ncluster_known_nodes:6\r\ncluster_size:3\r\ncluster_current_epoch:6\r\ncluster_my_epoch:1\r\ncluster_stats_messages_ping_sent:47\r\ncluster_stats_messages_pong_sent:54\r\ncluster_stats_messages_sent:101\r\ncluster_stats_messages_ping_received:49\r\ncluster_stats_messages_pong_received:50\r\ncluster_stats_messages_meet_received:5\r\ncluster_stats_messages_received:104\r\ncluster_stats_bytes_sent:261096\r\ncluster_stats_bytes_received:267144\r\ncluster_stats_pubsub_bytes_sent:0\r\ncluster_stats_pubsub_bytes_received:0\r\ncluster_stats_module_bytes_sent:0\r\ncluster_stats_module_bytes_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n";

    #[test]
    fn a_healthy_member_reports_every_slot_ok() {
        let c = ClusterInfo::parse(HEALTHY).unwrap();
        assert!(c.state_ok);
        assert_eq!((c.slots_assigned, c.slots_ok), (16384, 16384));
        assert_eq!((c.slots_pfail, c.slots_fail), (0, 0));
        assert_eq!((c.known_nodes, c.size, c.current_epoch), (6, 3, 6));
    }

    #[test]
    fn a_fresh_node_has_no_slots_and_fails() {
        let fresh = HEALTHY
            .replace("cluster_state:ok", "cluster_state:fail")
            .replace("cluster_slots_assigned:16384", "cluster_slots_assigned:0")
            .replace("cluster_slots_ok:16384", "cluster_slots_ok:0");
        let c = ClusterInfo::parse(&fresh).unwrap();
        assert!(!c.state_ok);
        assert_eq!((c.slots_assigned, c.slots_ok), (0, 0));
    }

    #[test]
    fn an_unknown_state_or_a_missing_field_is_named() {
        let odd = HEALTHY.replace("cluster_state:ok", "cluster_state:maybe");
        assert!(matches!(
            ClusterInfo::parse(&odd),
            Err(ParseError::InfoField { field, .. }) if field == "cluster_state"
        ));
        let short = HEALTHY.replace("cluster_known_nodes:6\r\n", "");
        assert_eq!(
            ClusterInfo::parse(&short),
            Err(ParseError::MissingInfoField {
                section: "cluster info",
                field: "cluster_known_nodes"
            })
        );
        assert!(matches!(
            ClusterInfo::parse("ERR This instance has cluster support disabled"),
            Err(ParseError::MissingInfoField {
                field: "cluster_state",
                ..
            })
        ));
    }
}
