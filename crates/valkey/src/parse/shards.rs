//! CLUSTER SHARDS: per shard its slots (flat start/end pairs), an id and its nodes
//! with id, ip, endpoint, hostname, port, role, replication-offset, health and (9.1)
//! availability-zone.

use super::Reply;
use super::value::{int, items, kind, pairs, text};
use super::{NodeId, ParseError, Role};
use crate::slots::{SlotRange, SlotSet};
use serde::Serialize;

/// What a shard's node reports about its own health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NodeHealth {
    Online,
    Failed,
    Loading,
    /// A value this parser does not know, kept as written.
    Other(String),
}

impl NodeHealth {
    fn from_word(word: &str) -> NodeHealth {
        match word {
            "online" => NodeHealth::Online,
            "fail" | "failed" => NodeHealth::Failed,
            "loading" => NodeHealth::Loading,
            other => NodeHealth::Other(other.to_string()),
        }
    }
}

/// One node of a CLUSTER SHARDS entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardNode {
    pub id: NodeId,
    pub ip: Option<String>,
    pub endpoint: Option<String>,
    pub hostname: Option<String>,
    pub port: Option<u16>,
    pub tls_port: Option<u16>,
    pub role: Role,
    pub replication_offset: i64,
    pub health: NodeHealth,
    pub availability_zone: Option<String>,
}

/// One entry of CLUSTER SHARDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterShard {
    /// The shard id (Valkey 8+), when reported.
    pub id: Option<String>,
    pub slots: SlotSet,
    pub nodes: Vec<ShardNode>,
}

fn err(path: String, reason: impl Into<String>) -> ParseError {
    ParseError::ClusterShards {
        path,
        reason: reason.into(),
    }
}

/// Parses a CLUSTER SHARDS reply (RESP2 or RESP3).
pub fn parse_cluster_shards(reply: &Reply) -> Result<Vec<ClusterShard>, ParseError> {
    let shards = items(reply).ok_or_else(|| {
        err(
            "reply".to_string(),
            format!("expected an array, got {}", kind(reply)),
        )
    })?;
    shards
        .iter()
        .enumerate()
        .map(|(i, shard)| parse_shard(shard, &format!("shard[{i}]")))
        .collect()
}

fn parse_shard(value: &Reply, path: &str) -> Result<ClusterShard, ParseError> {
    let fields = pairs(value).ok_or_else(|| {
        err(
            path.to_string(),
            format!("expected a map, got {}", kind(value)),
        )
    })?;
    let mut id = None;
    let mut slots = None;
    let mut nodes = None;
    for (key, value) in fields {
        match key.as_str() {
            "id" => id = text(value),
            "slots" => slots = Some(parse_slot_pairs(value, &format!("{path}.slots"))?),
            "nodes" => {
                let list = items(value).ok_or_else(|| {
                    err(
                        format!("{path}.nodes"),
                        format!("expected an array, got {}", kind(value)),
                    )
                })?;
                nodes = Some(
                    list.iter()
                        .enumerate()
                        .map(|(i, n)| parse_node(n, &format!("{path}.nodes[{i}]")))
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
            _ => {}
        }
    }
    Ok(ClusterShard {
        id,
        slots: slots.ok_or_else(|| err(path.to_string(), "missing field slots"))?,
        nodes: nodes.ok_or_else(|| err(path.to_string(), "missing field nodes"))?,
    })
}

/// `[start, end, start, end, ...]` as integers (or integer strings).
fn parse_slot_pairs(value: &Reply, path: &str) -> Result<SlotSet, ParseError> {
    let list = items(value).ok_or_else(|| {
        err(
            path.to_string(),
            format!("expected an array, got {}", kind(value)),
        )
    })?;
    if list.len() % 2 != 0 {
        return Err(err(path.to_string(), "odd number of slot bounds"));
    }
    let mut ranges = Vec::new();
    for (i, pair) in list.chunks(2).enumerate() {
        let bound = |v: &Reply, which: &str| {
            int(v).ok_or_else(|| {
                err(
                    format!("{path}[{}]", 2 * i),
                    format!("{which} is not a number"),
                )
            })
        };
        let (start, end) = (bound(&pair[0], "start")?, bound(&pair[1], "end")?);
        let range = u64::try_from(start)
            .ok()
            .zip(u64::try_from(end).ok())
            .ok_or_else(|| err(format!("{path}[{}]", 2 * i), "negative slot"))
            .and_then(|(s, e)| {
                SlotRange::from_numbers(s, e)
                    .map_err(|e| err(format!("{path}[{}]", 2 * i), e.to_string()))
            })?;
        ranges.push(range);
    }
    Ok(SlotSet::from_ranges(ranges))
}

fn parse_node(value: &Reply, path: &str) -> Result<ShardNode, ParseError> {
    let fields = pairs(value).ok_or_else(|| {
        err(
            path.to_string(),
            format!("expected a map, got {}", kind(value)),
        )
    })?;
    let mut id = None;
    let mut ip = None;
    let mut endpoint = None;
    let mut hostname = None;
    let mut port = None;
    let mut tls_port = None;
    let mut role = None;
    let mut offset = None;
    let mut health = None;
    let mut zone = None;
    let non_empty = |v: &Reply| text(v).filter(|t| !t.is_empty());
    let port_of = |v: &Reply, field: &str| -> Result<u16, ParseError> {
        int(v)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| err(format!("{path}.{field}"), "not a port number"))
    };
    for (key, value) in fields {
        match key.as_str() {
            "id" => {
                let raw = text(value).unwrap_or_default();
                id = Some(
                    raw.parse::<NodeId>()
                        .map_err(|e| err(format!("{path}.id"), e.to_string()))?,
                );
            }
            "ip" => ip = non_empty(value),
            "endpoint" => endpoint = non_empty(value),
            "hostname" => hostname = non_empty(value),
            "port" => port = Some(port_of(value, "port")?),
            "tls-port" => tls_port = Some(port_of(value, "tls-port")?),
            "role" => {
                let word = text(value).unwrap_or_default();
                role = Some(Role::from_word(&word).ok_or_else(|| {
                    err(format!("{path}.role"), format!("unknown role {word:?}"))
                })?);
            }
            "replication-offset" => {
                offset =
                    Some(int(value).ok_or_else(|| {
                        err(format!("{path}.replication-offset"), "not a number")
                    })?);
            }
            "health" => health = text(value).map(|w| NodeHealth::from_word(&w)),
            "availability-zone" => zone = non_empty(value),
            _ => {}
        }
    }
    Ok(ShardNode {
        id: id.ok_or_else(|| err(path.to_string(), "missing field id"))?,
        ip,
        endpoint,
        hostname,
        port,
        tls_port,
        role: role.ok_or_else(|| err(path.to_string(), "missing field role"))?,
        replication_offset: offset.unwrap_or(0),
        health: health.unwrap_or(NodeHealth::Other(String::new())),
        availability_zone: zone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::BulkString(s.as_bytes().to_vec())
    }

    fn node_fields(id: &str, port: i64, role: &str, zone: Option<&str>) -> Vec<(Reply, Reply)> {
        let mut f = vec![
            (bulk("id"), bulk(id)),
            (bulk("port"), Reply::Int(port)),
            (bulk("ip"), bulk("127.0.0.1")),
            (bulk("endpoint"), bulk("127.0.0.1")),
            (bulk("role"), bulk(role)),
            (bulk("replication-offset"), Reply::Int(3049)),
            (bulk("health"), bulk("online")),
        ];
        if let Some(z) = zone {
            f.push((bulk("availability-zone"), bulk(z)));
        }
        f
    }

    fn resp2(fields: Vec<(Reply, Reply)>) -> Reply {
        Reply::Array(fields.into_iter().flat_map(|(k, v)| [k, v]).collect())
    }

    const A: &str = "7f1b152befcb7e611e2e363dc1871561401e9ccd";
    const B: &str = "40085775a61ee79edfdab5784db37979187432cd";

    #[test]
    fn resp2_and_resp3_replies_parse_the_same() {
        let shard2 = resp2(vec![
            (
                bulk("slots"),
                Reply::Array(vec![
                    Reply::Int(0),
                    Reply::Int(1000),
                    Reply::Int(2000),
                    Reply::Int(2000),
                ]),
            ),
            (
                bulk("nodes"),
                Reply::Array(vec![
                    resp2(node_fields(A, 7103, "master", Some("zone-a"))),
                    resp2(node_fields(B, 7104, "replica", None)),
                ]),
            ),
            (bulk("id"), bulk("da29c5b45e26713fe38054243ecfec936ca9c6d7")),
        ]);
        let shard3 = Reply::Map(vec![
            (
                bulk("slots"),
                Reply::Array(vec![
                    Reply::Int(0),
                    Reply::Int(1000),
                    Reply::Int(2000),
                    Reply::Int(2000),
                ]),
            ),
            (
                bulk("nodes"),
                Reply::Array(vec![
                    Reply::Map(node_fields(A, 7103, "master", Some("zone-a"))),
                    Reply::Map(node_fields(B, 7104, "replica", None)),
                ]),
            ),
            (bulk("id"), bulk("da29c5b45e26713fe38054243ecfec936ca9c6d7")),
        ]);
        let two = parse_cluster_shards(&Reply::Array(vec![shard2])).unwrap();
        let three = parse_cluster_shards(&Reply::Array(vec![shard3])).unwrap();
        assert_eq!(two, three);
        let shard = &two[0];
        assert_eq!(shard.slots.to_string(), "0-1000 2000");
        assert_eq!(shard.nodes[0].role, Role::Primary);
        assert_eq!(shard.nodes[0].availability_zone.as_deref(), Some("zone-a"));
        assert_eq!(shard.nodes[0].port, Some(7103));
        assert_eq!(shard.nodes[0].replication_offset, 3049);
        assert_eq!(shard.nodes[0].health, NodeHealth::Online);
        assert_eq!(shard.nodes[1].role, Role::Replica);
        assert_eq!(shard.nodes[1].availability_zone, None);
    }

    #[test]
    fn a_shard_without_slots_has_an_empty_set() {
        let shard = resp2(vec![
            (bulk("slots"), Reply::Array(vec![])),
            (
                bulk("nodes"),
                Reply::Array(vec![resp2(node_fields(A, 1, "master", None))]),
            ),
        ]);
        let parsed = parse_cluster_shards(&Reply::Array(vec![shard])).unwrap();
        assert!(parsed[0].slots.is_empty());
        assert_eq!(parsed[0].id, None);
    }

    #[test]
    fn errors_name_the_path_of_the_bad_field() {
        let shard = resp2(vec![
            (
                bulk("slots"),
                Reply::Array(vec![Reply::Int(0), Reply::Int(99999)]),
            ),
            (bulk("nodes"), Reply::Array(vec![])),
        ]);
        match parse_cluster_shards(&Reply::Array(vec![shard])) {
            Err(ParseError::ClusterShards { path, .. }) => assert_eq!(path, "shard[0].slots[0]"),
            other => panic!("unexpected {other:?}"),
        }
        let mut fields = node_fields(A, 1, "leader", None);
        fields.truncate(5);
        let shard = resp2(vec![
            (bulk("slots"), Reply::Array(vec![])),
            (bulk("nodes"), Reply::Array(vec![resp2(fields)])),
        ]);
        match parse_cluster_shards(&Reply::Array(vec![shard])) {
            Err(ParseError::ClusterShards { path, reason }) => {
                assert_eq!(path, "shard[0].nodes[0].role");
                assert!(reason.contains("leader"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(parse_cluster_shards(&Reply::Int(3)).is_err());
    }
}
