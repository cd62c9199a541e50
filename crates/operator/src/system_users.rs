//! The operator's system users, which every kind of set has: the replication
//! user every replica logs in to its primary with, and the operator's own.

use std::collections::BTreeSet;
use valkey::acl::{DesiredUser, password_hash};

/// The replication user's rules: what a replica sends its primary (PSYNC,
/// SYNC, REPLCONF, PING), and what a slot migration's source sends its
/// target. Valkey 9's atomic slot migration logs in with the same
/// `primaryuser`, then runs `CLUSTER SYNCSLOTS` and the slots' keys as
/// ordinary, ACL-checked write commands (SELECT, SET, RPUSH, RESTORE...:
/// measured on valkey-server 9.1.2, where a user with the replication
/// commands alone failed the migration with NOPERM), so the user needs
/// every key and the data commands. It gets no administrative command
/// (`-@admin`: CONFIG, ACL, SHUTDOWN, DEBUG, REPLICAOF, FAILOVER, CLUSTER
/// topology changes...) and no FLUSHALL, FLUSHDB or SWAPDB; the
/// replication commands, which are `@admin`, are granted back by name.
pub const REPLICATION_RULES: &[&str] = &[
    "~*",
    "&*",
    "+@all",
    "-@admin",
    "-flushall",
    "-flushdb",
    "-swapdb",
    "+psync",
    "+sync",
    "+replconf",
    "+ping",
    "+cluster|syncslots",
];

/// The operator's own user's rules: the commands the operator sends
/// (`valkey_client::client::COMMANDS_SENT`) and nothing else. It reads what members
/// say (INFO, ROLE, CONFIG GET, ACL LIST, CLUSTER NODES...), runs the
/// cluster (CLUSTER MEET, REPLICATE, ADDSLOTSRANGE, FAILOVER, MIGRATESLOTS,
/// FORGET, RESET...), waits for replicas (WAIT), sets live config (CONFIG
/// SET), users (ACL SETUSER, DELUSER) and drops clients after a TLS switch
/// (CLIENT KILL). No key, no channel, no data command: its password opens
/// no application data. ACL SETUSER makes it an administrator all the same
/// (it could grant itself more), which is why it is the operator's alone.
pub fn operator_rules() -> Vec<String> {
    valkey_client::client::COMMANDS_SENT
        .iter()
        .map(|c| format!("+{c}"))
        .collect()
}

/// The operator's own user with `password`.
pub fn operator_user(password: &str) -> DesiredUser {
    DesiredUser {
        name: api::constants::OPERATOR_USER.to_string(),
        enabled: true,
        hashes: BTreeSet::from([password_hash(password)]),
        rules: operator_rules(),
    }
}

/// The replication user (`primaryuser` of every member) with `password`.
pub fn replication_user(password: &str) -> DesiredUser {
    DesiredUser {
        name: api::constants::REPLICATION_USER.to_string(),
        enabled: true,
        hashes: BTreeSet::from([password_hash(password)]),
        rules: REPLICATION_RULES.iter().map(|r| r.to_string()).collect(),
    }
}

/// The users file lines of the system users (`user <name> <rules>`).
pub fn lines(system: &[DesiredUser]) -> String {
    system
        .iter()
        .map(|user| format!("user {} {}\n", user.name, user.setuser_args().join(" ")))
        .collect()
}
