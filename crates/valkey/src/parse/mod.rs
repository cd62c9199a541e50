//! Parsing what Valkey says about itself: CLUSTER NODES, CLUSTER SHARDS,
//! CLUSTER INFO, INFO, ROLE and CLUSTER GETSLOTMIGRATIONS, into typed plain data.
//!
//! Every parser is total: unexpected input gives a [`ParseError`] that names the
//! reply, the line or path, and the field that failed. Unknown extra fields and
//! flags are kept or skipped (newer servers add them), never an error.

mod cluster_info;
mod info;
mod migrations;
mod nodes;
mod role;
mod shards;
mod value;
pub use value::Reply;

pub use cluster_info::ClusterInfo;
pub use info::{Info, PrimaryLink, ReplicaEntry, ReplicationInfo};
pub use migrations::{MigrationOperation, MigrationState, SlotMigration, parse_slot_migrations};
pub use nodes::{ClusterNode, ClusterNodes, LinkState, NodeAddress, NodeFlags, SlotMarker};
pub use role::RoleReply;
pub use shards::{ClusterShard, NodeHealth, ShardNode, parse_cluster_shards};

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Errors of parsing a Valkey reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A CLUSTER NODES line with a field that does not parse.
    #[error("CLUSTER NODES line {}: field {field}: {reason}", excerpt(.line))]
    ClusterNodesLine {
        line: String,
        field: &'static str,
        reason: String,
    },
    /// A CLUSTER NODES reply without the `myself` line, or with two.
    #[error("CLUSTER NODES reply: {reason}")]
    ClusterNodes { reason: String },
    /// A CLUSTER SHARDS reply whose structure or field does not parse.
    #[error("CLUSTER SHARDS reply at {path}: {reason}")]
    ClusterShards { path: String, reason: String },
    /// A CLUSTER GETSLOTMIGRATIONS reply whose structure or field does not parse.
    #[error("CLUSTER GETSLOTMIGRATIONS reply at {path}: {reason}")]
    SlotMigrations { path: String, reason: String },
    /// An INFO field whose value does not parse.
    #[error("INFO field {}: {reason} (value {})", excerpt(.field), excerpt(.value))]
    InfoField {
        field: String,
        value: String,
        reason: String,
    },
    /// An INFO field that must be present and is not.
    #[error("INFO {section}: missing field {field}")]
    MissingInfoField {
        section: &'static str,
        field: &'static str,
    },
    /// A ROLE reply that does not parse.
    #[error("ROLE reply: {reason}")]
    Role { reason: String },
    /// A reply of an unexpected type (e.g. a number where text was expected).
    #[error("{command} reply: {reason}")]
    Reply {
        command: &'static str,
        reason: String,
    },
    /// Text that is not a Valkey node id.
    #[error("node id {}: {reason}", excerpt(.value))]
    NodeId { value: String, reason: &'static str },
}

/// Text a server sent, quoted for a message: its first [`EXCERPT_CHARS`]
/// characters and its length when longer. A member runs the image its
/// tenant chose, and a reply can be megabytes long: messages carry what
/// helps, never the reply (they reach logs, statuses and events).
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &text[..end], text.len()),
    }
}

/// [`excerpt`] without the quotes: for a message that is a server's text
/// already (an error reply).
pub fn truncated(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_CHARS) {
        None => text.to_string(),
        Some((end, _)) => format!("{}... ({} bytes)", &text[..end], text.len()),
    }
}

/// How much of a server's error text a message keeps (see [`truncated`]).
pub const MESSAGE_CHARS: usize = 300;

/// How much of a server's text a message quotes (see [`excerpt`]).
pub const EXCERPT_CHARS: usize = 80;

impl ParseError {
    /// A stable category string for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::ClusterNodesLine { .. } | Self::ClusterNodes { .. } => "parse_cluster_nodes",
            Self::ClusterShards { .. } => "parse_cluster_shards",
            Self::SlotMigrations { .. } => "parse_slot_migrations",
            Self::InfoField { .. } | Self::MissingInfoField { .. } => "parse_info",
            Self::Role { .. } => "parse_role",
            Self::Reply { .. } => "parse_reply",
            Self::NodeId { .. } => "parse_node_id",
        }
    }
}

/// A Valkey node id: 40 lowercase hexadecimal characters, as CLUSTER MYID prints it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct NodeId(String);

impl NodeId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 characters, enough to tell nodes apart in logs.
    pub fn short(&self) -> &str {
        // Always 40 ASCII characters, so the slice is in bounds and on a char boundary.
        self.0.get(..8).unwrap_or(&self.0)
    }
}

impl FromStr for NodeId {
    type Err = ParseError;
    fn from_str(text: &str) -> Result<NodeId, ParseError> {
        if text.len() != 40 {
            return Err(ParseError::NodeId {
                value: text.to_string(),
                reason: "must be 40 characters",
            });
        }
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ParseError::NodeId {
                value: text.to_string(),
                reason: "must be hexadecimal",
            });
        }
        Ok(NodeId(text.to_ascii_lowercase()))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The role of a node, however the reply spells it (`master`/`primary`,
/// `slave`/`replica`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Role {
    Primary,
    Replica,
}

impl Role {
    /// Parses `master`, `primary`, `slave` or `replica`.
    pub fn from_word(word: &str) -> Option<Role> {
        match word {
            "master" | "primary" => Some(Role::Primary),
            "slave" | "replica" => Some(Role::Replica),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_message_quotes_a_long_reply_only_in_part() {
        let line = "x".repeat(4_000_000);
        let e = super::ParseError::ClusterNodesLine {
            line,
            field: "id",
            reason: "must be 40 characters".into(),
        };
        let message = e.to_string();
        assert!(message.len() < 200, "{} bytes", message.len());
        assert!(message.contains("(4000000 bytes)"), "{message}");
        assert_eq!(super::excerpt("short"), "\"short\"");
        // Cut on a character, not a byte.
        let wide = "é".repeat(100);
        assert_eq!(
            super::excerpt(&wide),
            format!("{:?}... (200 bytes)", "é".repeat(80))
        );
    }

    use super::*;

    #[test]
    fn node_ids_must_be_forty_hex_characters() {
        let id: NodeId = "c1c15d512c42d114ec7d1752ff4fb59311542412".parse().unwrap();
        assert_eq!(id.short(), "c1c15d51");
        assert!(matches!(
            "abc".parse::<NodeId>(),
            Err(ParseError::NodeId {
                reason: "must be 40 characters",
                ..
            })
        ));
        assert!(matches!(
            "z1c15d512c42d114ec7d1752ff4fb59311542412".parse::<NodeId>(),
            Err(ParseError::NodeId {
                reason: "must be hexadecimal",
                ..
            })
        ));
    }

    #[test]
    fn node_ids_compare_case_insensitively() {
        let lower: NodeId = "c1c15d512c42d114ec7d1752ff4fb59311542412".parse().unwrap();
        let upper: NodeId = "C1C15D512C42D114EC7D1752FF4FB59311542412".parse().unwrap();
        assert_eq!(lower, upper);
    }
}
