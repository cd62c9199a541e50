//! INFO: `# Section` headers and `field:value` lines; and the replication section
//! typed (role, the replica's link to its primary, offsets, connected replicas).

use super::{ParseError, Role};
use serde::Serialize;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The fields of an INFO reply (all sections merged; field names are unique).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Info {
    fields: BTreeMap<String, String>,
}

impl Info {
    /// Parses INFO text; header, blank and malformed lines are skipped.
    pub fn parse(text: &str) -> Info {
        let fields = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Info { fields }
    }

    /// Every field.
    pub fn fields(&self) -> &BTreeMap<String, String> {
        &self.fields
    }

    /// A field's raw value.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }

    /// The value of the first of `names` that is present (Valkey renames some
    /// `master_*` fields `primary_*`; accept both).
    fn first(&self, names: &[&str]) -> Option<(&str, &str)> {
        names
            .iter()
            .find_map(|n| self.fields.get_key_value(*n))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// A field parsed as `T`; `Ok(None)` when absent, an error naming the field when
    /// it does not parse.
    pub fn parsed<T: FromStr>(&self, field: &str) -> Result<Option<T>, ParseError> {
        self.get(field).map(|v| parse_field(field, v)).transpose()
    }

    /// A field of `section` parsed as `T`; an error naming the field when it
    /// is absent or does not parse.
    pub fn required<T: FromStr>(
        &self,
        section: &'static str,
        field: &'static str,
    ) -> Result<T, ParseError> {
        self.parsed(field)?
            .ok_or(ParseError::MissingInfoField { section, field })
    }

    /// The keys of every database, from the keyspace section (`dbN:keys=K,...`
    /// lines). Valkey 9 has several databases in cluster mode too, so DBSIZE
    /// (the selected database only) can call a member empty that is not.
    pub fn keyspace_keys(&self) -> Result<u64, ParseError> {
        Ok(self
            .keys_by_db()?
            .values()
            .fold(0u64, |total, keys| total.saturating_add(*keys)))
    }

    /// The keys of each database the keyspace section lists (`dbN:keys=K,...`;
    /// an empty database has no line).
    pub fn keys_by_db(&self) -> Result<BTreeMap<u32, u64>, ParseError> {
        let mut out = BTreeMap::new();
        for (field, value) in &self.fields {
            let Some(index) = field.strip_prefix("db") else {
                continue;
            };
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let db: u32 = parse_field(field, index)?;
            let keys = value
                .split(',')
                .find_map(|kv| kv.strip_prefix("keys="))
                .ok_or_else(|| ParseError::InfoField {
                    field: field.clone(),
                    value: value.clone(),
                    reason: "no keys= count".into(),
                })?;
            out.insert(db, parse_field::<u64>(field, keys)?);
        }
        Ok(out)
    }
}

fn parse_field<T: FromStr>(field: &str, value: &str) -> Result<T, ParseError> {
    value.trim().parse().map_err(|_| ParseError::InfoField {
        field: field.to_string(),
        value: value.to_string(),
        reason: format!("not a {}", std::any::type_name::<T>()),
    })
}

/// A replica's link to its primary, from the replica's INFO replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrimaryLink {
    pub host: String,
    pub port: u16,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// `master_sync_in_progress:1`: a full sync is running.
    pub sync_in_progress: bool,
    /// `slave_repl_offset`: how far into the primary's stream the replica has applied.
    pub repl_offset: i64,
    /// `master_last_io_seconds_ago`, `None` when -1 (never).
    pub last_io_seconds_ago: Option<i64>,
}

/// A `slaveN:ip=..,port=..,state=..,offset=..,lag=..` line of a primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaEntry {
    pub ip: String,
    pub port: u16,
    /// `online`, `wait_bgsave`, `send_bulk`, ...
    pub state: String,
    pub offset: i64,
    pub lag: i64,
}

/// INFO replication, typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicationInfo {
    pub role: Role,
    /// `master_repl_offset`: the node's own replication stream offset (on a replica,
    /// what it has received from its primary).
    pub repl_offset: i64,
    /// `connected_slaves`.
    pub connected_replicas: u32,
    /// The `slaveN` lines.
    pub replicas: Vec<ReplicaEntry>,
    /// Present when the node is a replica.
    pub primary_link: Option<PrimaryLink>,
}

impl ReplicationInfo {
    /// Parses the text of `INFO replication`.
    pub fn parse(text: &str) -> Result<ReplicationInfo, ParseError> {
        ReplicationInfo::from_info(&Info::parse(text))
    }

    /// Reads the replication fields of a parsed INFO.
    pub fn from_info(info: &Info) -> Result<ReplicationInfo, ParseError> {
        let section = "replication";
        let role_word = info.get("role").ok_or(ParseError::MissingInfoField {
            section,
            field: "role",
        })?;
        let role = Role::from_word(role_word).ok_or_else(|| ParseError::InfoField {
            field: "role".to_string(),
            value: role_word.to_string(),
            reason: "unknown role".to_string(),
        })?;
        let number = |names: &[&str], field: &'static str| -> Result<i64, ParseError> {
            match info.first(names) {
                Some((name, value)) => parse_field(name, value),
                None => Err(ParseError::MissingInfoField { section, field }),
            }
        };
        let repl_offset = number(
            &["master_repl_offset", "primary_repl_offset"],
            "master_repl_offset",
        )?;
        let connected_replicas = match info.first(&["connected_slaves", "connected_replicas"]) {
            Some((name, value)) => parse_field(name, value)?,
            None => 0,
        };
        let mut replicas = Vec::new();
        for (name, value) in info.fields() {
            let is_entry = name
                .strip_prefix("slave")
                .or_else(|| name.strip_prefix("replica"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if is_entry {
                replicas.push(parse_replica_entry(name, value)?);
            }
        }
        let primary_link = match role {
            Role::Primary => None,
            Role::Replica => {
                let text = |names: &[&str], field: &'static str| {
                    info.first(names)
                        .map(|(_, v)| v.to_string())
                        .ok_or(ParseError::MissingInfoField { section, field })
                };
                let host = text(&["master_host", "primary_host"], "master_host")?;
                let port = match info.first(&["master_port", "primary_port"]) {
                    Some((name, value)) => parse_field::<u16>(name, value)?,
                    None => {
                        return Err(ParseError::MissingInfoField {
                            section,
                            field: "master_port",
                        });
                    }
                };
                let status = text(
                    &["master_link_status", "primary_link_status"],
                    "master_link_status",
                )?;
                let sync = number(
                    &["master_sync_in_progress", "primary_sync_in_progress"],
                    "master_sync_in_progress",
                )?;
                let offset = number(
                    &["slave_repl_offset", "replica_repl_offset"],
                    "slave_repl_offset",
                )?;
                let last_io = match info
                    .first(&["master_last_io_seconds_ago", "primary_last_io_seconds_ago"])
                {
                    Some((name, value)) => {
                        Some(parse_field::<i64>(name, value)?).filter(|v| *v >= 0)
                    }
                    None => None,
                };
                Some(PrimaryLink {
                    host,
                    port,
                    link_up: status == "up",
                    sync_in_progress: sync != 0,
                    repl_offset: offset,
                    last_io_seconds_ago: last_io,
                })
            }
        };
        Ok(ReplicationInfo {
            role,
            repl_offset,
            connected_replicas,
            replicas,
            primary_link,
        })
    }
}

fn parse_replica_entry(name: &str, value: &str) -> Result<ReplicaEntry, ParseError> {
    let parts: BTreeMap<&str, &str> = value.split(',').filter_map(|p| p.split_once('=')).collect();
    let field = |key: &str| {
        parts
            .get(key)
            .copied()
            .ok_or_else(|| ParseError::InfoField {
                field: name.to_string(),
                value: value.to_string(),
                reason: format!("missing {key}="),
            })
    };
    let number = |key: &str| -> Result<i64, ParseError> {
        let raw = field(key)?;
        raw.parse().map_err(|_| ParseError::InfoField {
            field: name.to_string(),
            value: value.to_string(),
            reason: format!("{key}={raw} is not a number"),
        })
    };
    let port = number("port")?;
    Ok(ReplicaEntry {
        ip: field("ip")?.to_string(),
        port: u16::try_from(port).map_err(|_| ParseError::InfoField {
            field: name.to_string(),
            value: value.to_string(),
            reason: format!("port={port} is not a port"),
        })?,
        state: field("state")?.to_string(),
        offset: number("offset")?,
        lag: number("lag").unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLICA: &str = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:7103\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:6\r\nmaster_sync_in_progress:0\r\nslave_read_repl_offset:3049\r\nslave_repl_offset:3049\r\nslave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\nmaster_replid:a0816911d7d8ef5a945464e77fc84d2da10edd9a\r\nmaster_repl_offset:3049\r\nsecond_repl_offset:-1\r\n";
    const PRIMARY: &str = "# Replication\nrole:master\nconnected_slaves:2\nslave0:ip=127.0.0.1,port=7104,state=online,offset=3049,lag=0,type=replica\nslave1:ip=127.0.0.1,port=7105,state=wait_bgsave,offset=0,lag=1,type=replica\nreplicas_waiting_psync:0\nmaster_failover_state:no-failover\nmaster_repl_offset:3050\nsecond_repl_offset:-1\n";

    #[test]
    fn a_replica_reports_its_link_and_offset() {
        let info = ReplicationInfo::parse(REPLICA).unwrap();
        assert_eq!(info.role, Role::Replica);
        let link = info.primary_link.unwrap();
        assert_eq!((link.host.as_str(), link.port), ("127.0.0.1", 7103));
        assert!(link.link_up && !link.sync_in_progress);
        assert_eq!(link.repl_offset, 3049);
        assert_eq!(link.last_io_seconds_ago, Some(6));
    }

    #[test]
    fn a_primary_lists_its_replicas() {
        let info = ReplicationInfo::parse(PRIMARY).unwrap();
        assert_eq!(info.role, Role::Primary);
        assert_eq!(info.repl_offset, 3050);
        assert_eq!(info.connected_replicas, 2);
        assert_eq!(info.replicas.len(), 2);
        assert_eq!(info.replicas[1].state, "wait_bgsave");
        assert_eq!(info.replicas[0].port, 7104);
        assert!(info.primary_link.is_none());
    }

    #[test]
    fn a_never_connected_replica_has_no_last_io() {
        let text = REPLICA
            .replace("master_link_status:up", "master_link_status:down")
            .replace(
                "master_last_io_seconds_ago:6",
                "master_last_io_seconds_ago:-1",
            );
        let link = ReplicationInfo::parse(&text).unwrap().primary_link.unwrap();
        assert!(!link.link_up);
        assert_eq!(link.last_io_seconds_ago, None);
    }

    #[test]
    fn missing_and_bad_fields_are_named() {
        assert_eq!(
            ReplicationInfo::parse("# Replication\n"),
            Err(ParseError::MissingInfoField {
                section: "replication",
                field: "role"
            })
        );
        let bad = REPLICA.replace("slave_repl_offset:3049", "slave_repl_offset:lots");
        assert!(matches!(
            ReplicationInfo::parse(&bad),
            Err(ParseError::InfoField { field, .. }) if field == "slave_repl_offset"
        ));
        let bad_entry = PRIMARY.replace("port=7104", "port=huge");
        assert!(matches!(
            ReplicationInfo::parse(&bad_entry),
            Err(ParseError::InfoField { field, .. }) if field == "slave0"
        ));
    }

    #[test]
    fn generic_fields_parse_on_demand() {
        let info = Info::parse("# Keyspace\ndb0:keys=89,expires=0\n# Persistence\nloading:0\n");
        assert_eq!(info.parsed::<u8>("loading").unwrap(), Some(0));
        assert_eq!(info.parsed::<u8>("absent").unwrap(), None);
        assert!(info.parsed::<u8>("db0").is_err());
        assert_eq!(info.get("db0"), Some("keys=89,expires=0"));
    }

    #[test]
    fn keys_are_counted_in_every_database_not_only_db0() {
        let info = Info::parse(
            "# Keyspace\ndb0:keys=3,expires=0,avg_ttl=0\ndb5:keys=40,expires=1,avg_ttl=9\n",
        );
        assert_eq!(info.keyspace_keys().unwrap(), 43);
        // A member with keys only outside db 0 is not empty.
        let only_db7 = Info::parse("# Keyspace\ndb7:keys=1,expires=0,avg_ttl=0\n");
        assert_eq!(only_db7.keyspace_keys().unwrap(), 1);
        assert_eq!(Info::parse("# Keyspace\n").keyspace_keys().unwrap(), 0);
        let by_db = Info::parse("db0:keys=3,expires=0\ndb12:keys=40,expires=1\n")
            .keys_by_db()
            .unwrap();
        assert_eq!(by_db, BTreeMap::from([(0, 3), (12, 40)]));
        let bad = Info::parse("db1:keys=many,expires=0\n");
        assert!(
            matches!(bad.keyspace_keys(), Err(ParseError::InfoField { field, .. }) if field == "db1")
        );
    }
}
