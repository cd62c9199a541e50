//! CLUSTER GETSLOTMIGRATIONS (Valkey 9 atomic slot migration): the jobs a node runs
//! or ran, each with name, operation (EXPORT on the source, IMPORT on the target),
//! slot_ranges (`s-e` separated by spaces), source_node, target_node, state and
//! message. Finished jobs stay listed for a while with state success, failed or
//! cancelled.

use super::Reply;
use super::value::{int, items, kind, pairs, text};
use super::{NodeId, ParseError};
use crate::slots::{SlotRange, SlotSet};
use serde::Serialize;

/// Which side of a migration the answering node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MigrationOperation {
    /// The answering node is the source.
    Export,
    /// The answering node is the target.
    Import,
}

/// Where a job is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum MigrationState {
    /// Not finished; the state name as Valkey reports it (`snapshotting`,
    /// `replicating`, `failover-granted`, ...).
    Running(String),
    Success,
    Failed,
    Cancelled,
}

impl MigrationState {
    fn from_word(word: &str) -> MigrationState {
        match word {
            "success" => MigrationState::Success,
            "failed" => MigrationState::Failed,
            "cancelled" | "canceled" => MigrationState::Cancelled,
            other => MigrationState::Running(other.to_string()),
        }
    }

    /// Whether the job is over (successfully or not).
    pub fn is_finished(&self) -> bool {
        !matches!(self, MigrationState::Running(_))
    }
}

/// One job of CLUSTER GETSLOTMIGRATIONS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotMigration {
    pub name: String,
    pub operation: MigrationOperation,
    pub slots: SlotSet,
    /// The source primary; `None` when not reported (a replica of the target lists
    /// the import without it).
    pub source: Option<NodeId>,
    /// The target primary, when reported.
    pub target: Option<NodeId>,
    pub state: MigrationState,
    /// Why a job failed, empty otherwise.
    pub message: String,
    /// Unix seconds of the job's creation, when reported.
    pub create_time: Option<i64>,
    pub remaining_repl_size: Option<i64>,
}

fn err(path: String, reason: impl Into<String>) -> ParseError {
    ParseError::SlotMigrations {
        path,
        reason: reason.into(),
    }
}

/// Parses a CLUSTER GETSLOTMIGRATIONS reply (RESP2 or RESP3).
pub fn parse_slot_migrations(reply: &Reply) -> Result<Vec<SlotMigration>, ParseError> {
    let jobs = items(reply).ok_or_else(|| {
        err(
            "reply".to_string(),
            format!("expected an array, got {}", kind(reply)),
        )
    })?;
    jobs.iter()
        .enumerate()
        .map(|(i, job)| parse_job(job, &format!("job[{i}]")))
        .collect()
}

fn parse_job(value: &Reply, path: &str) -> Result<SlotMigration, ParseError> {
    let fields = pairs(value).ok_or_else(|| {
        err(
            path.to_string(),
            format!("expected a map, got {}", kind(value)),
        )
    })?;
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    let required_text = |name: &'static str| {
        get(name)
            .and_then(text)
            .ok_or_else(|| err(format!("{path}.{name}"), "missing"))
    };
    // Optional: an empty or absent id is None; text that is not an id is an error.
    let node = |name: &'static str| -> Result<Option<NodeId>, ParseError> {
        match get(name)
            .and_then(text)
            .filter(|t| !t.is_empty() && t != "unknown")
        {
            None => Ok(None),
            Some(t) => t
                .parse::<NodeId>()
                .map(Some)
                .map_err(|e| err(format!("{path}.{name}"), e.to_string())),
        }
    };
    let operation = match required_text("operation")?.to_ascii_uppercase().as_str() {
        "EXPORT" => MigrationOperation::Export,
        "IMPORT" => MigrationOperation::Import,
        other => {
            return Err(err(
                format!("{path}.operation"),
                format!("unknown operation {other:?}"),
            ));
        }
    };
    let ranges = required_text("slot_ranges")?;
    let slots = ranges
        .split_ascii_whitespace()
        .map(|r| r.parse::<SlotRange>())
        .collect::<Result<SlotSet, _>>()
        .map_err(|e| err(format!("{path}.slot_ranges"), e.to_string()))?;
    Ok(SlotMigration {
        name: get("name").and_then(text).unwrap_or_default(),
        operation,
        slots,
        source: node("source_node")?,
        target: node("target_node")?,
        state: MigrationState::from_word(&required_text("state")?),
        message: get("message").and_then(text).unwrap_or_default(),
        create_time: get("create_time").and_then(int),
        remaining_repl_size: get("remaining_repl_size").and_then(int),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::BulkString(s.as_bytes().to_vec())
    }

    fn job(state: &str, ranges: &str) -> Vec<(Reply, Reply)> {
        vec![
            (
                bulk("name"),
                bulk("378cb35f2eb9b051eea5995c7ea8fc31a8b5b87d"),
            ),
            (bulk("operation"), bulk("EXPORT")),
            (bulk("slot_ranges"), bulk(ranges)),
            (
                bulk("target_node"),
                bulk("7f1b152befcb7e611e2e363dc1871561401e9ccd"),
            ),
            (
                bulk("source_node"),
                bulk("c1c15d512c42d114ec7d1752ff4fb59311542412"),
            ),
            (bulk("create_time"), Reply::Int(1796229525)),
            (bulk("state"), bulk(state)),
            (bulk("message"), bulk("")),
            (bulk("cow_size"), Reply::Int(0)),
            (bulk("remaining_repl_size"), Reply::Int(0)),
        ]
    }

    #[test]
    fn running_and_finished_jobs_parse_in_both_protocols() {
        let resp2 = Reply::Array(vec![Reply::Array(
            job("snapshotting", "1001-1100 2000-2000")
                .into_iter()
                .flat_map(|(k, v)| [k, v])
                .collect(),
        )]);
        let resp3 = Reply::Array(vec![Reply::Map(job("success", "0-1000"))]);
        let running = parse_slot_migrations(&resp2).unwrap();
        assert_eq!(
            running[0].state,
            MigrationState::Running("snapshotting".into())
        );
        assert!(!running[0].state.is_finished());
        assert_eq!(running[0].slots.to_string(), "1001-1100 2000");
        assert_eq!(running[0].operation, MigrationOperation::Export);
        let done = parse_slot_migrations(&resp3).unwrap();
        assert!(done[0].state.is_finished());
        assert_eq!(done[0].create_time, Some(1796229525));
    }

    #[test]
    fn a_job_with_bad_ranges_names_the_field() {
        let reply = Reply::Array(vec![Reply::Map(job("failed", "9-3"))]);
        match parse_slot_migrations(&reply) {
            Err(ParseError::SlotMigrations { path, .. }) => assert_eq!(path, "job[0].slot_ranges"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_replica_import_without_source_node_parses() {
        let mut fields = job("success", "0-1365");
        fields.retain(|(k, _)| k != &bulk("source_node"));
        fields.push((bulk("target_node"), bulk("")));
        fields.retain(|(k, v)| !(k == &bulk("target_node") && v != &bulk("")));
        let parsed = parse_slot_migrations(&Reply::Array(vec![Reply::Map(fields)])).unwrap();
        assert_eq!(parsed[0].source, None);
        assert_eq!(parsed[0].target, None);
    }

    #[test]
    fn a_bad_node_id_is_named() {
        let mut fields = job("success", "0-1");
        fields.retain(|(k, _)| k != &bulk("source_node"));
        fields.push((bulk("source_node"), bulk("xyz")));
        match parse_slot_migrations(&Reply::Array(vec![Reply::Map(fields)])) {
            Err(ParseError::SlotMigrations { path, .. }) => assert_eq!(path, "job[0].source_node"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn no_jobs_is_an_empty_list() {
        assert!(
            parse_slot_migrations(&Reply::Array(vec![]))
                .unwrap()
                .is_empty()
        );
    }
}
