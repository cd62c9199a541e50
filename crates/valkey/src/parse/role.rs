//! ROLE: `[master, offset, [[ip, port, offset], ...]]` or
//! `[slave, primary-ip, primary-port, state, offset]`.

use super::ParseError;
use super::Reply;
use super::value::{int, items, kind, text};
use serde::Serialize;

/// A parsed ROLE reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum RoleReply {
    Primary {
        offset: i64,
        /// `(ip, port, acknowledged offset)` of each connected replica.
        replicas: Vec<(String, u16, i64)>,
    },
    Replica {
        primary_ip: String,
        primary_port: u16,
        /// `connect`, `connecting`, `sync` or `connected`.
        state: String,
        offset: i64,
    },
}

impl RoleReply {
    /// Whether the node answered as a primary.
    pub fn is_primary(&self) -> bool {
        matches!(self, RoleReply::Primary { .. })
    }

    /// Parses the reply.
    pub fn parse(reply: &Reply) -> Result<RoleReply, ParseError> {
        let err = |reason: String| ParseError::Role { reason };
        let parts =
            items(reply).ok_or_else(|| err(format!("expected an array, got {}", kind(reply))))?;
        let word = parts
            .first()
            .and_then(text)
            .ok_or_else(|| err("missing role".to_string()))?;
        let number = |i: usize, what: &str| {
            parts
                .get(i)
                .and_then(int)
                .ok_or_else(|| err(format!("{what} is missing or not a number")))
        };
        let port = |v: i64, what: &str| {
            u16::try_from(v).map_err(|_| err(format!("{what} {v} is not a port")))
        };
        match word.as_str() {
            "master" | "primary" => {
                let mut replicas = Vec::new();
                if let Some(list) = parts.get(2).and_then(items) {
                    for entry in list {
                        let e = items(entry)
                            .ok_or_else(|| err("replica entry is not an array".to_string()))?;
                        let ip = e.first().and_then(text).unwrap_or_default();
                        let p = e
                            .get(1)
                            .and_then(int)
                            .ok_or_else(|| err("replica port is missing".to_string()))?;
                        let offset = e.get(2).and_then(int).unwrap_or(0);
                        replicas.push((ip, port(p, "replica port")?, offset));
                    }
                }
                Ok(RoleReply::Primary {
                    offset: number(1, "offset")?,
                    replicas,
                })
            }
            "slave" | "replica" => Ok(RoleReply::Replica {
                primary_ip: parts.get(1).and_then(text).unwrap_or_default(),
                primary_port: port(number(2, "primary port")?, "primary port")?,
                state: parts.get(3).and_then(text).unwrap_or_default(),
                offset: number(4, "offset")?,
            }),
            other => Err(err(format!("unknown role {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn primary_and_replica_replies_parse() {
        let primary = Reply::Array(vec![
            bulk("master"),
            Reply::Int(3049),
            Reply::Array(vec![Reply::Array(vec![
                bulk("127.0.0.1"),
                bulk("7103"),
                bulk("3049"),
            ])]),
        ]);
        assert_eq!(
            RoleReply::parse(&primary).unwrap(),
            RoleReply::Primary {
                offset: 3049,
                replicas: vec![("127.0.0.1".into(), 7103, 3049)]
            }
        );
        let replica = Reply::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Reply::Int(7104),
            bulk("connected"),
            Reply::Int(3063),
        ]);
        let parsed = RoleReply::parse(&replica).unwrap();
        assert!(!parsed.is_primary());
        assert!(matches!(
            parsed,
            RoleReply::Replica {
                primary_port: 7104,
                offset: 3063,
                ..
            }
        ));
    }

    #[test]
    fn unknown_roles_are_refused_with_the_word() {
        let sentinel = Reply::Array(vec![bulk("sentinel"), Reply::Array(vec![])]);
        assert!(
            matches!(RoleReply::parse(&sentinel), Err(ParseError::Role { reason }) if reason.contains("sentinel"))
        );
    }
}
